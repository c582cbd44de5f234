"""Preemption: pick the fewest, lowest-priority victims (whole gangs as one) that make a pod or a
gang fit, honouring preemptionPolicy and PodDisruptionBudgets. Pure: no I/O.
"""
