"""Tests of the crash-and-churn harness (``devcluster.churn``) and its short run in CI."""
