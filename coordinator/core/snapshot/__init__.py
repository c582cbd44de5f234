"""What the plugins see: nodes with their pods, free GPUs, MIG instances and NUMA capacity."""
