"""A pod manifest parsed once into a ``PodRequest``: resources, selectors, Topos keys, gangs."""
