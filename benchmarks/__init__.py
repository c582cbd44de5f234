"""The benchmark programs (``python -m benchmarks.<name>``; ``make bench`` runs them all)."""
