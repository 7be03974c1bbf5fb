"""Sweeps: one function over many configurations, on a local process pool or a Slurm array.

``run_sweep(function, configs, jobs=N)`` returns ``[function(c) for c in configs]`` in order,
whatever N: each configuration carries everything its randomness depends on (its seed, keyed
draws from seeds.py), so nothing depends on which worker ran it or when. Results go through
JSON (lists for tuples, string keys) whether they ran here or on Slurm, so both give the same
values. ``function`` must be a module-level function (workers and array tasks import it by
name). ``slurm=PARTITION`` runs one array task per configuration instead (slurm_array.py).
``cache=ResultCache(...)`` keeps each configuration's result on disk as it finishes, keyed by
the configuration and the code it ran with, so an interrupted sweep resumes where it stopped.
See docs/reproductions.md ("Sweeps").
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from siteagent.cli.console import progress_bar

Config = Mapping[str, Any]
Function = Callable[[Config], Any]


class SweepError(RuntimeError):
    """A configuration failed (it names which, and why)."""


#: The source tree: code versions name files relative to it.
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ResultCache:
    """Finished configurations' results under ``directory``, one file each, at
    ``directory/<function and configuration digest>/<code version>.json``; the code version
    is a digest of the files (or folders) ``code`` names. ``any_version``: take a kept result
    whatever code made it (the newest), for a change to a report's code only."""

    directory: Path
    code: Tuple[str, ...] = ("siteagent",)
    any_version: bool = False
    #: the kept runs :meth:`get` read back, by the code version that made them
    read: Dict[str, int] = field(default_factory=dict)

    def _folder(self, function: Function, config: Config) -> Path:
        name = f"{function.__module__}.{function.__qualname__}"
        text = json.dumps([name, dict(config)], sort_keys=True)
        return self.directory / hashlib.sha256(text.encode()).hexdigest()[:24]

    def get(self, function: Function, config: Config) -> Optional[Dict[str, Any]]:
        """``{"result": ...}`` kept for this configuration, or None."""
        folder = self._folder(function, config)
        kept = folder / f"{code_version(self.code)}.json"
        if self.any_version and not kept.exists():
            found = sorted(folder.glob("*.json"), key=lambda path: path.stat().st_mtime)
            kept = found[-1] if found else kept
        if not kept.exists():
            return None
        entry: Dict[str, Any] = json.loads(kept.read_text())
        self.read[kept.stem] = self.read.get(kept.stem, 0) + 1
        return entry

    def put(self, function: Function, config: Config, result: Any) -> None:
        """Keep ``result`` atomically (a partial write never looks finished)."""
        folder = self._folder(function, config)
        folder.mkdir(parents=True, exist_ok=True)
        kept = folder / f"{code_version(self.code)}.json"
        partial = kept.with_name(f"{kept.stem}.{os.getpid()}.part")
        partial.write_text(json.dumps({"config": dict(config), "result": result}))
        partial.replace(kept)


@functools.cache
def code_version(code: Tuple[str, ...]) -> str:
    """A digest of every Python file under the paths ``code`` names (relative to the tree)."""
    digest = hashlib.sha256()
    for entry in code:
        path = ROOT / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def run_sweep(
    function: Function,
    configs: Sequence[Config],
    jobs: Optional[int] = None,
    slurm: Optional[str] = None,
    label: str = "sweep",
    work_dir: Optional[Path] = None,
    sbatch_args: Sequence[str] = (),
    cache: Optional[ResultCache] = None,
) -> List[Any]:
    """``[function(config) for config in configs]``, in parallel: ``jobs`` local processes
    (default: every CPU), or one Slurm array task per configuration on partition ``slurm``
    (``work_dir``: where the tasks' files go, on a file system the nodes share). With
    ``cache``, configurations it holds are read back and the rest kept as they finish."""
    configs = [dict(config) for config in configs]
    _check_serializable(configs)
    results: List[Any] = [None] * len(configs)
    pending = list(range(len(configs)))
    if cache is not None:
        kept = [cache.get(function, config) for config in configs]
        for index, entry in enumerate(kept):
            if entry is not None:
                results[index] = entry["result"]
        pending = [index for index, entry in enumerate(kept) if entry is None]

    def finished(index: int, result: Any) -> None:
        results[index] = result
        if cache is not None:
            cache.put(function, configs[index], result)

    if slurm is not None and pending:
        from bench.repro.slurm_array import run_array

        todo = [configs[index] for index in pending]
        done = run_array(function, todo, slurm, label, work_dir, sbatch_args)
        for index, result in zip(pending, done):
            finished(index, result)
        return results
    _run_local(function, configs, pending, jobs, label, finished)
    return results


def _run_local(
    function: Function,
    configs: Sequence[Config],
    pending: Sequence[int],
    jobs: Optional[int],
    label: str,
    finished: Callable[[int, Any], None],
) -> None:
    workers = min(jobs or os.cpu_count() or 1, len(pending))
    kept = len(configs) - len(pending)
    title = f"{label} ({len(configs)} runs, {kept} kept, {max(workers, 1)} processes)"
    with progress_bar(title) as advance:
        advance(kept / max(len(configs), 1))
        if workers <= 1:
            for done, index in enumerate(pending, 1):
                finished(index, call_through_json(function, configs[index], index))
                advance((kept + done) / len(configs))
            return
        # forkserver: workers start clean (no inherited threads or locks), import by name
        context = multiprocessing.get_context("forkserver")
        with context.Pool(workers) as pool:
            calls = [(function, configs[index], index) for index in pending]
            for done, (index, result) in enumerate(pool.imap_unordered(_indexed, calls), 1):
                finished(index, result)
                advance((kept + done) / len(configs))


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
