"""What-if: where would these workloads go now, why not, and what would make them fit — on a copy
of the scheduler's snapshot, changing nothing (docs/whatif.md)."""
