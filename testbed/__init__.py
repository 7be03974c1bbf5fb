"""What the tests and the benchmarks run against, and the helpers they share.

Grouped by how a test uses them:

- ``inprocess``: helpers that run inside the test process (the API without a server, scripted
  sites and bidders, a scripted HTTPS server, parties and receipts, offers, records, SWF traces,
  a clock and a faulty backend, the lifecycle's promises, hypothesis strategies, raw HTTP).
- ``processes``: harnesses that start real processes (``siteagent serve`` agents, a market
  and its bank, lifecycle sites, crash/break-point runs, PostgreSQL), ``programs`` (system
  programs, waiting, stopping) and ``ports`` (where they listen: below the kernel's ephemeral
  range, a block for each pytest-xdist worker).
- ``slurm``: a private real Slurm cluster, its accounting, queues of real jobs, an agent on it,
  and the Slurm releases (host or chroot) it runs.
- ``pbs``: a private real OpenPBS.
- ``sims``: simulators held beside the project's own (the reference simulator, English
  auctions in simulated time).
- ``standins``: the batch systems this machine cannot run.
- ``compiled``: mypyc modules older than their sources, which the test session refuses.

The tests and bench/ import this package; neither it nor bench/ imports ``tests``
(tests/unit/test_layout.py checks).
"""
