"""The coordinator's configuration file as one typed tree (``topos coordinator --config F``).

- :mod:`.sections` — the tree (:class:`~.sections.Config`) and the sections only the program reads.
- :mod:`.load` — reading the file: YAML, unknown keys, types, one :class:`~.load.ConfigError`.

Every section and key is listed in ``docs/deploy.md``.
"""
