"""The daemon: the polling loop, each cycle's state, and the Prometheus metrics taken from it."""
