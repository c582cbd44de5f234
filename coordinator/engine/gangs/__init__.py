"""Gangs on a running scheduler: the all-or-nothing step, recovery, running pods."""
