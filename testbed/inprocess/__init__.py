"""Use this when the test runs everything in its own process: no server, no child process."""
