"""Slurm through pyslurm: the Slurm backend without child processes.

Why: a site that already runs pyslurm avoids forking ``squeue``/``sinfo``/``scontrol`` on
every poll, and gets the controller's answers as objects rather than text. pyslurm must be
built for the local Slurm (pyslurm ``X.Y.*`` for Slurm ``X.Y``), so it is imported lazily and
only this backend needs it.

- ``versions``: the releases supported (22.5 on) and the refusal of the others;
- ``records``: jobs and nodes (the object API every supported release has) as the records the
  Slurm backend's parsers read;
- ``scheduler``: the controller's placement and backfill settings, which the node-aware plan
  follows, by ``scontrol show config``'s names;
- ``reservations``: the legacy ``pyslurm.reservation`` class of 22.5 to 24.x and the
  ``pyslurm.Reservation(s)`` objects of 25.5 on, behind one interface;
- ``backend``: the Backend, with its timeouts and its reading of Slurm's refusals.
"""

from siteagent.backends.pyslurm.backend import PyslurmBackend

__all__ = ["PyslurmBackend"]
