"""Batch-system adapters. Each turns one batch system into ClusterSnapshots and reservations."""
