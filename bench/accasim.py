"""Run AccaSim 1.1.3 as the reference simulator of the benchmark.

AccaSim lives in its own virtualenv (``bench/.work/venv-accasim``) and is driven through
``bench/accasim_ref.py`` in a subprocess, so neither siteagent nor the benchmark driver imports
it. Typical use::

    from bench.accasim import run_accasim

    res = run_accasim("traces/SDSC-SP2-1998-4.2-cln.swf.gz", 128, out_jobs="sdsc-accasim.csv")
    print(res["wall_s"], res["jobs_per_s"], res["mean_bounded_slowdown"])

See ``bench/ACCASIM.md`` for how AccaSim's EASY differs from textbook EASY.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Any, Iterator, Sequence, Union

ACCASIM_VERSION = "1.1.3"
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_VENV = BENCH_DIR / ".work" / "venv-accasim"
REF_SCRIPT = BENCH_DIR / "accasim_ref.py"

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "ACCASIM_VERSION",
    "DEFAULT_VENV",
    "REF_SCRIPT",
    "AccaSimError",
    "ensure_accasim_venv",
    "run_accasim",
]


class AccaSimError(RuntimeError):
    """The AccaSim venv could not be built, or a replay failed."""


def _venv_python(path: Path) -> Path:
    if os.name == "nt":
        return path / "Scripts" / "python.exe"
    return path / "bin" / "python"


def _installed_version(python: Path) -> str | None:
    if not python.exists():
        return None
    try:
        out = subprocess.run(
            [str(python), "-c", "import accasim; print(accasim.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Serialise venv creation between concurrent benchmark processes (POSIX only)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_accasim_venv(path: PathLike | None = None, *, quiet: bool = True) -> Path:
    """Create (once) a virtualenv with ``accasim==1.1.3`` and return its python executable.

    Idempotent: if the venv at ``path`` (default ``bench/.work/venv-accasim``) already imports
    AccaSim 1.1.3, nothing is installed. pip pulls AccaSim's own requirements (numpy, scipy,
    matplotlib, psutil, sortedcontainers); none of them is needed by siteagent.
    """
    root = Path(path) if path is not None else DEFAULT_VENV
    python = _venv_python(root)
    if _installed_version(python) == ACCASIM_VERSION:
        return python
    with _lock(root.parent / (root.name + ".lock")):
        if _installed_version(python) == ACCASIM_VERSION:  # built by a concurrent process
            return python
        if not python.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(str(root))
        cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
        if quiet:
            cmd.append("-q")
        cmd.append(f"accasim=={ACCASIM_VERSION}")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise AccaSimError(
                f"pip install accasim=={ACCASIM_VERSION} failed in {root} "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            )
        got = _installed_version(python)
        if got != ACCASIM_VERSION:
            raise AccaSimError(f"{python} imports accasim {got!r}, expected {ACCASIM_VERSION}")
    return python


def run_accasim(
    trace: PathLike,
    cores: int | None = None,
    out_jobs: PathLike | None = None,
    timeout: float | None = 3600.0,
    *,
    python: PathLike | None = None,
    layout: str = "one-node",
    native_output: bool = False,
    extra_args: Sequence[str] = (),
) -> dict[str, Any]:
    """Replay ``trace`` with AccaSim's EASY backfilling (FirstFit) and return its JSON summary.

    ``cores`` is P (default: the trace header's MaxProcs). ``out_jobs`` receives a CSV of
    ``id,submit,start,end,cores`` per job. ``layout`` is ``"one-node"`` (one node of P cores,
    the default and AccaSim's cheapest form) or ``"cores"`` (P one-core nodes; same schedule,
    slower). The returned dict holds the script's fields (``jobs``, ``wall_s``, ``jobs_per_s``,
    ``peak_rss_mb``, ``mean_wait_s``, ``mean_bounded_slowdown``, ``utilization``,
    ``makespan_s``, ``accasim_version``, ``prefilter_s``, ...) plus ``process_wall_s``, the
    whole subprocess's elapsed time. Raises :class:`AccaSimError` if the replay fails and
    :class:`subprocess.TimeoutExpired` after ``timeout`` seconds (the child is killed).
    """
    exe = Path(python) if python is not None else ensure_accasim_venv()
    cmd = [str(exe), str(REF_SCRIPT), os.fspath(trace), "--layout", layout]
    if cores is not None:
        cmd += ["--cores", str(int(cores))]
    if out_jobs is not None:
        cmd += ["--out-jobs", os.fspath(out_jobs)]
    if native_output:
        cmd.append("--native-output")
    cmd += list(extra_args)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # keep the caller's packages out of AccaSim's interpreter
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise AccaSimError(
            f"accasim_ref.py failed (exit {proc.returncode}) on {trace}:\n{proc.stderr[-4000:]}"
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise AccaSimError(f"accasim_ref.py printed nothing on {trace}:\n{proc.stderr[-4000:]}")
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise AccaSimError(f"accasim_ref.py printed no JSON: {lines[-1][:500]!r}") from e
    result["process_wall_s"] = round(elapsed, 4)
    return result


if __name__ == "__main__":  # pragma: no cover - manual use
    import argparse

    ap = argparse.ArgumentParser(description="Run the AccaSim reference replay")
    ap.add_argument("trace")
    ap.add_argument("--cores", type=int, default=None)
    ap.add_argument("--out-jobs", default=None)
    ap.add_argument("--layout", default="one-node", choices=("one-node", "cores"))
    ns = ap.parse_args()
    json.dump(run_accasim(ns.trace, ns.cores, ns.out_jobs, layout=ns.layout), sys.stdout, indent=2)
    print()
