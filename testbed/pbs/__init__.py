"""Use this when the test needs a real OpenPBS (built by tests/setup/build-openpbs)."""
