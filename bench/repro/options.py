"""The options every repro command takes, and the run settings they give.

``--seeds N`` (the paper module's default, 10 unless it says otherwise), ``--quick`` (2 seeds
and the module's small setup), ``--jobs N`` (local processes, default every CPU),
``--slurm PARTITION`` (sweeps as Slurm job arrays instead, ``--sbatch=--time=1:00:00`` for
more sbatch options), ``--json`` (the report as JSON on stdout), ``--out DIR`` (where the
reports go, default bench/results). See docs/reproductions.md.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from bench.common import RESULTS
from bench.repro.sweep import Config, Function, ResultCache, run_sweep

QUICK_SEEDS = 2


@dataclass(frozen=True)
class Options:
    """What a repro run was asked to do."""

    seeds: int
    quick: bool
    jobs: int
    slurm: Optional[str]
    json: bool
    out: Path
    sbatch_args: Tuple[str, ...] = ()

    @property
    def seed_list(self) -> List[int]:
        """Seeds 0 ... N-1: every arm of every comparison runs on each."""
        return list(range(self.seeds))

    def sweep(
        self,
        function: Function,
        configs: Sequence[Config],
        label: str,
        cache: Optional[ResultCache] = None,
    ) -> List[Any]:
        """``[function(c) for c in configs]`` on the pool or the Slurm array these options
        name, in configuration order; ``cache`` keeps finished ones (sweep.py)."""
        return run_sweep(
            function,
            configs,
            self.jobs,
            self.slurm,
            label,
            sbatch_args=self.sbatch_args,
            cache=cache,
        )

    def to_dict(self) -> dict:  # type: ignore[type-arg]
        return {
            "seeds": self.seeds,
            "quick": self.quick,
            "jobs": self.jobs,
            "slurm": self.slurm,
            "sbatch_args": list(self.sbatch_args),
        }


def add_options(parser: argparse.ArgumentParser, seeds: int = 10) -> None:
    """Add the common options to a repro command's parser (``seeds``: its default count)."""
    group = parser.add_argument_group("common reproduction options")
    group.add_argument(
        "--seeds",
        type=_positive,
        default=None,
        metavar="N",
        help=f"paired seeds 0..N-1 (default {seeds}; {QUICK_SEEDS} with --quick)",
    )
    group.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_SEEDS} seeds and the command's small setup (minutes)",
    )
    group.add_argument(
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        metavar="N",
        help="local worker processes for sweeps (default: every CPU); results do not depend on it",
    )
    group.add_argument(
        "--slurm",
        metavar="PARTITION",
        help="run sweeps as Slurm job arrays on PARTITION (one task per configuration; the "
        "source tree, where bench/.work/slurm holds the tasks' files, must be on a file "
        "system the nodes share)",
    )
    group.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="--OPTION=VALUE",
        help="an extra sbatch option for --slurm arrays, e.g. --sbatch=--time=2:00:00 (repeatable)",
    )
    group.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    group.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        metavar="DIR",
        help=f"where repro-NAME.json/.md and the plots go (default {RESULTS})",
    )
    parser.set_defaults(default_seeds=seeds)


def options_from(args: argparse.Namespace) -> Options:
    """The run settings from parsed arguments (``add_options`` added them)."""
    seeds = args.seeds or (QUICK_SEEDS if args.quick else args.default_seeds)
    return Options(
        seeds=seeds,
        quick=args.quick,
        jobs=args.jobs,
        slurm=args.slurm,
        json=args.json,
        out=args.out,
        sbatch_args=tuple(args.sbatch),
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value
