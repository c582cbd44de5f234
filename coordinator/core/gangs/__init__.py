"""Gangs (pod groups): identity from three vocabularies, whole-gang planning, the all-or-nothing
manager, and recovery planning. Pure: no I/O, time injected. See docs/gangs.md.
"""
