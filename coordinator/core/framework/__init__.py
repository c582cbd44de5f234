"""The scheduling framework: plugin interfaces (``interfaces``), results, status, cycle state,
config, one profile's plugins (``profile.Framework``) and the cycle (``cycle.schedule_one``).
It names no plugin: :mod:`coordinator.core.registry` builds a profile."""
