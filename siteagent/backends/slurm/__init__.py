"""Slurm through its command-line clients: ``squeue/sinfo --json`` and ``scontrol``.

Why the command line: the JSON of ``squeue``/``sinfo`` is the same object model slurmrestd
serves, needs no daemon or token, and costs a few milliseconds per call; reservations can only
be created, updated and deleted with ``scontrol`` in 22.05 (slurmrestd is read-only for them).
Every behaviour relied on here was observed on Slurm 22.05.8 and is written down with samples in
``docs/slurm.md``; the section numbers in these modules refer to it.

The modules: ``config`` (what the agent may do), ``layout`` (the two JSON layouts), ``hostlist``
and ``times`` (Slurm's compressed lists and time text), ``jobs``, ``nodes`` and
``reservations`` (parsers of the clients' output), ``arguments`` (the requests' argument lists),
``snapshot`` (the partition's view), ``errors`` (what failures mean), ``backend`` (the commands
run) and ``sacct`` (queue waits from accounting).
"""

from siteagent.backends.slurm.backend import SlurmBackend
from siteagent.backends.slurm.config import SlurmConfig

__all__ = ["SlurmBackend", "SlurmConfig"]
