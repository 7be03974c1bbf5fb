"""The harness's API in one import: ``from bench.repro.common import Report, rng, ...``.

Seeds (seeds.py), statistics (stats.py), paper values and verdicts (paper_values.py,
verdicts.py), load calibration (calibrate.py), sweeps (sweep.py, slurm_array.py), options
(options.py), reports and plots (report.py, plots.py). docs/reproductions.md explains them.
"""

from __future__ import annotations

from bench.repro.calibrate import calibrate, days, overlay_scaling, trace
from bench.repro.options import Options, add_options, options_from
from bench.repro.paper_values import PaperValue, paper_value, paper_values, seed_ids
from bench.repro.plots import draw_replica, replica
from bench.repro.report import Report
from bench.repro.seeds import rng, seed_int, uniform
from bench.repro.stats import (
    Estimate,
    bootstrap_ci,
    exact,
    mean_ci,
    paired_change,
    ratio_ci,
)
from bench.repro.sweep import ResultCache, SweepError, run_sweep
from bench.repro.verdicts import DIFFERS, MATCH, NOT_AVAILABLE, NOT_RUN, TREND, Verdict, judge

__all__ = [
    "DIFFERS",
    "MATCH",
    "NOT_AVAILABLE",
    "NOT_RUN",
    "TREND",
    "Estimate",
    "Options",
    "PaperValue",
    "Report",
    "ResultCache",
    "SweepError",
    "Verdict",
    "add_options",
    "bootstrap_ci",
    "calibrate",
    "days",
    "draw_replica",
    "exact",
    "judge",
    "mean_ci",
    "options_from",
    "overlay_scaling",
    "paired_change",
    "paper_value",
    "paper_values",
    "ratio_ci",
    "replica",
    "rng",
    "run_sweep",
    "seed_ids",
    "seed_int",
    "trace",
    "uniform",
]
