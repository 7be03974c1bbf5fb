"""The shared reproduction harness: paired seeds, statistics, verdicts against the papers'
values, load calibration, sweeps on a process pool or a Slurm array, reports and plots.

Paper modules import the API from ``bench.repro.common`` and are listed in registry.py (this
package stays light: ``python -m bench`` reads the registry). The five-minute guide is
docs/reproductions.md; the spec is issue 30's (its harness part).
"""
