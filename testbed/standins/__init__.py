"""Stand-ins for what cannot be installed here: OpenPBS (``pbs``: its commands and a server
backed by the simulator) and pyslurm (``pyslurm/pyslurm``: a fake package the tests put first
on ``sys.path``; ``pyslurm/`` itself is that path entry, not a package)."""
