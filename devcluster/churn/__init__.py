"""The crash-and-churn harness: seeded rounds of pods, gangs, deletions, re-creations under reused
names and coordinator SIGKILLs on the real control plane, checked from the API server alone
(``plan`` what to do, ``fleet`` the processes, ``checks`` the invariants, ``harness`` the rounds,
``failover`` two coordinators). ``tests/churn/test_churn.py`` runs a short version in CI;
``benchmarks/churn_soak.py`` the long one (docs/testing.md)."""
