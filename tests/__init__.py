"""Test suite: unit, property and integration tests (real Slurm, real Prometheus)."""
