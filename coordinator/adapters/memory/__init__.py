"""An in-process cluster (Nodes, Pods, Events) for the demo and ``--in-memory``."""
