"""Use this when the test needs a real Slurm: a private cluster on localhost and what runs on it."""
