"""Sweeps: one function over many configurations, on a local process pool or a Slurm array.

``run_sweep(function, configs, jobs=N)`` returns ``[function(c) for c in configs]`` in order,
whatever N: each configuration carries everything its randomness depends on (its seed, keyed
draws from seeds.py), so nothing depends on which worker ran it or when. Results go through
JSON (lists for tuples, string keys) whether they ran here or on Slurm, so both give the same
values. ``function`` must be a module-level function (workers and array tasks import it by
name). ``slurm=PARTITION`` runs one array task per configuration instead (slurm_array.py).
See docs/reproductions.md ("Sweeps").
"""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Sequence

from siteagent.cli.console import progress_bar

Config = Mapping[str, Any]
Function = Callable[[Config], Any]


class SweepError(RuntimeError):
    """A configuration failed (it names which, and why)."""


def run_sweep(
    function: Function,
    configs: Sequence[Config],
    jobs: Optional[int] = None,
    slurm: Optional[str] = None,
    label: str = "sweep",
    work_dir: Optional[Path] = None,
    sbatch_args: Sequence[str] = (),
) -> List[Any]:
    """``[function(config) for config in configs]``, in parallel: ``jobs`` local processes
    (default: every CPU), or one Slurm array task per configuration on partition ``slurm``
    (``work_dir``: where the tasks' files go, on a file system the nodes share)."""
    configs = [dict(config) for config in configs]
    _check_serializable(configs)
    if slurm is not None:
        from bench.repro.slurm_array import run_array

        return run_array(function, configs, slurm, label, work_dir, sbatch_args)
    workers = min(jobs or os.cpu_count() or 1, len(configs))
    results: List[Any] = [None] * len(configs)
    with progress_bar(f"{label} ({len(configs)} runs, {max(workers, 1)} processes)") as advance:
        if workers <= 1:
            for index, config in enumerate(configs):
                results[index] = call_through_json(function, config, index)
                advance((index + 1) / len(configs))
            return results
        # forkserver: workers start clean (no inherited threads or locks), import by name
        context = multiprocessing.get_context("forkserver")
        with context.Pool(workers) as pool:
            calls = [(function, config, index) for index, config in enumerate(configs)]
            for done, (index, result) in enumerate(pool.imap_unordered(_indexed, calls), 1):
                results[index] = result
                advance(done / len(configs))
    return results


def _indexed(call: Any) -> Any:
    function, config, index = call
    return index, call_through_json(function, config, index)


def call_through_json(function: Function, config: Config, index: int) -> Any:
    """function(config) through JSON, so that every way of running gives the same values."""
    try:
        result = function(config)
    except Exception as exc:
        raise SweepError(
            f"configuration {index} ({json.dumps(config, sort_keys=True)}) failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return json.loads(json.dumps(result, allow_nan=True))


def _check_serializable(configs: Sequence[Config]) -> None:
    for index, config in enumerate(configs):
        try:
            json.dumps(config)
        except TypeError as exc:
            raise SweepError(
                f"configuration {index} is not JSON ({exc}): use numbers, strings, lists and "
                "dicts, so that it can run in another process or on a Slurm node"
            ) from exc
