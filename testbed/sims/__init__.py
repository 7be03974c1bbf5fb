"""Use this when a result must be checked against a second, independent simulation."""
