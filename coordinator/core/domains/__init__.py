"""Network domains (leaf / spine / zone from node labels), placement strategies, domain summaries.

Pure: no I/O. See docs/gangs.md.
"""
