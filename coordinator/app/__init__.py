"""The coordinator program: configuration, wiring, leader election, security."""
