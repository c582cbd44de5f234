"""Kueue's AdmissionCheck answered by Topos (``controllerName: topos.io/placement``)."""
