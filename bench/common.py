"""What every benchmark shares: running a measured child process, medians, result files."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TRACES = ROOT / "traces"


@dataclass
class Measured:
    """A child process's output, wall time and peak resident memory."""

    stdout: str
    stderr: str
    returncode: int
    wall_s: float
    peak_rss_mb: float


def run_measured(
    argv: Sequence[str],
    timeout: float = 3600.0,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[str] = None,
) -> Measured:
    """Run a command; its own peak RSS comes from wait4 on it (not the largest child so far).

    Output goes through temporary files so that nothing reaps the child before wait4 does.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        began = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err, text=True, env=env, cwd=cwd)
        deadline = began + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise subprocess.TimeoutExpired(list(argv), timeout)
            time.sleep(0.01)
        wall = time.perf_counter() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(out.read(), err.read(), proc.returncode, wall, usage.ru_maxrss / 1024)


#: Where the benchmarks' installed copies of the tree live, one venv per version of the sources.
INSTALLS = ROOT / "bench" / ".work"


def installed_siteagent(source: Path = ROOT, pure: bool = False) -> str:
    """Python of a venv holding the tree at ``source`` (this one by default) installed as users
    get it (compiled when possible).

    Benchmarks measure the package as installed, whatever the development venv holds (its
    editable install puts the compiled modules beside the sources); children run it from
    outside the source tree so that the installed modules, not the sources, are imported. With
    ``pure``, the install skips compiling (SITEAGENT_PURE_PYTHON=1): the baseline a compiled
    figure is compared with. Each version of the sources gets its own venvs, built once under a
    lock, so that benchmarks running at the same time never reinstall a package another one is
    importing.
    """
    venv = INSTALLS / f"venv-siteagent-{_sources_digest(source)}{'-pure' if pure else ''}"
    python, done = venv / "bin" / "python", venv / ".installed"
    INSTALLS.mkdir(parents=True, exist_ok=True)
    with open(INSTALLS / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            pip = [str(python), "-m", "pip", "install", "--quiet"]
            subprocess.run([*pip, "--upgrade", "pip"], check=True)
            env = {**os.environ, "SITEAGENT_PURE_PYTHON": "1"} if pure else None
            subprocess.run([*pip, str(source)], check=True, env=env)
            done.touch()
    return str(python)


def _sources_digest(source: Path) -> str:
    """A digest of everything that goes into the package installed from ``source``."""
    digest = hashlib.sha256()
    build = [source / "setup.py", source / "pyproject.toml"]
    for path in [*sorted((source / "siteagent").rglob("*")), *build]:
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so":
            digest.update(str(path.relative_to(source)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def commit_of(revision: str) -> str:
    """The full commit id a git ``revision`` of this repository names."""
    return subprocess.run(
        ["git", "rev-parse", "--verify", "--end-of-options", f"{revision}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def source_at(revision: str) -> Path:
    """The tree of this repository at a git ``revision``, extracted once under bench/.work/
    (named by its commit): a version to install and compare with the working tree."""
    commit = commit_of(revision)
    tree = INSTALLS / f"source-{commit[:12]}"
    done = tree / ".extracted"
    INSTALLS.mkdir(parents=True, exist_ok=True)
    with open(INSTALLS / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(tree, ignore_errors=True)
            tree.mkdir()
            archive = INSTALLS / f"source-{commit[:12]}.tar"
            subprocess.run(["git", "archive", f"--output={archive}", commit], cwd=ROOT, check=True)
            subprocess.run(["tar", "-x", "-f", str(archive), "-C", str(tree)], check=True)
            archive.unlink()
            done.touch()
    return tree


def compiled(python: str) -> bool:
    """Whether that Python imports the mypyc-compiled scheduling engines."""
    probe = run_measured(
        [python, "-c", "import siteagent.core.engines as s; print(s.__file__)"], cwd=OUTSIDE
    )
    return not probe.stdout.strip().endswith(".py")


def running_compiled() -> bool:
    """Whether this process imports the mypyc-compiled scheduling engines."""
    import siteagent.core.engines

    return not siteagent.core.engines.__file__.endswith(".py")


#: Where children run, so that ``import siteagent`` finds the installed package.
OUTSIDE = tempfile.gettempdir()


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> Dict[str, Any]:
    """Where the figures were measured (they mean little without it)."""
    load = os.getloadavg()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1m_at_start": round(load[0], 2),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def ended(started: Dict[str, Any]) -> Dict[str, Any]:
    """`started` (a `machine()` taken before measuring) with the load at the end beside it."""
    return {**started, "load_average_1m_at_end": round(os.getloadavg()[0], 2)}


def cpu_probe_s() -> float:
    """Seconds a fixed pure-Python loop takes now: how fast this shared machine runs at the
    moment (the same loop took 0.36 to 0.70 s within one hour), beside figures that depend
    on it."""
    began = time.perf_counter()
    total = 0
    for number in range(3_000_000):
        total += number * number
    return round(time.perf_counter() - began, 3)


def write_results(name: str, data: Mapping[str, Any], markdown: str) -> None:
    """bench/results/<name>.json (figures) and bench/results/<name>.md (for people)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(f"wrote {RESULTS / (name + '.json')} and {RESULTS / (name + '.md')}")


def md_table(rows: List[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table; floats with 3 significant decimals."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"
