"""What the tests and the benchmarks run against, and the helpers they share.

Real systems: ``slurm_cluster`` (a private Slurm cluster on localhost: munged, slurmctld, one
slurmd per node), ``slurm_accounting`` (its mariadbd and slurmdbd), ``slurm_queue`` (real jobs
submitted to it), ``processes`` (system programs, free ports, waiting, stopping), ``agents``
(``siteagent serve`` over HTTPS), ``raw_http`` (raw requests to it, oversized or malformed, as
an attacker sends them), ``sites`` (a site whose agent and commands run as real
processes), ``crashrun`` (``siteagent`` with a crash point, run by the crash test).

In one process: ``api_harness`` (the API without a server), ``parties`` (buyers and sites with
keys, deals and receipts), ``offers``, ``records`` (the store's reservation records),
``traces`` (SWF files by hand), ``fakes`` (a clock, a faulty backend), ``promises`` (the
reservation lifecycle's, as one check), ``strategies`` (hypothesis) and ``compiled``
(mypyc modules older than their sources, which the test session refuses).

``standins`` holds the batch systems this machine cannot run. The tests and bench/ import
this package; neither it nor bench/ imports ``tests`` (tests/unit/test_layout.py checks).
"""
