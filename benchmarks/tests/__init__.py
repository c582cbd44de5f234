"""Tests of the benchmark programs themselves (their judging, reports and runner), beside them:
``tests`` never imports ``benchmarks`` and ``benchmarks`` never imports ``tests`` (lint-imports)."""
