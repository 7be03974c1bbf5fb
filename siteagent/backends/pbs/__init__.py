"""OpenPBS / PBS Professional through its command-line clients.

What is read, and why these commands (section numbers in these modules refer to
``docs/pbs.md``):

* ``qstat -f -F json -t`` (§2): every job with every attribute; ``-t`` lists the subjobs of
  arrays, so that running subjobs hold their cores in the snapshot. **No ``Jobs`` key** means
  an empty queue, but qstat prints the same header-only document when it cannot reach the
  server (and then exits non-zero): the exit status decides, never the JSON alone.
* ``pbsnodes -av -F json`` (§4): vnodes, their state words and resources.
  ``resources_assigned`` leaves zero values out, so a missing ``ncpus`` means 0; a vnode in
  ``job-exclusive``/``resv-exclusive`` is wholly used whatever its assigned ncpus say.
* ``pbs_rstat -f`` (§6): reservations. There is no JSON form; ``-f`` prints ``key = value``
  lines without wrapping.

Dates in ``qstat``/``pbs_rstat`` output and in ``pbs_rsub -R/-E`` are local wall-clock times of
the command (§1), so every command runs with ``TZ=UTC`` and the text is unambiguous UTC.

The modules: ``config`` (what the agent may do), ``values`` (PBS's value formats), ``jobs``,
``nodes`` and ``reservations`` (parsers of the clients' output), ``arguments`` (``pbs_rsub``'s
argument list and reply), ``snapshot`` (the queue's view), ``errors`` (what failures mean) and
``backend`` (the commands run, and waiting for a confirmation).
"""

from siteagent.backends.pbs.backend import PbsBackend
from siteagent.backends.pbs.config import PbsConfig

__all__ = ["PbsBackend", "PbsConfig"]
