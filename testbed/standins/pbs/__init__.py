"""A command-line stand-in for OpenPBS, backed by the simulator (see README.md here)."""
