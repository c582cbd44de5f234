"""The scheduling framework: plugin interfaces, status, cycle state, config and the cycle."""
