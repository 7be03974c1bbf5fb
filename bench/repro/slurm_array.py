"""A sweep as a Slurm job array: one array task per configuration, results gathered from files.

``run_array`` writes the configurations and a task script into a work directory (which the
nodes must see: the source tree and it on a shared file system), submits ``sbatch --array``
with an argument list (no shell), and waits for ``result-<i>.json`` of every configuration,
showing progress; a task that fails leaves ``error-<i>.txt`` with its traceback, and the sweep
stops with it; each task runs ``task_main`` on the work directory. Arrays larger
than the cluster's MaxArraySize (1001 by default) give each task every N-th configuration.
See docs/reproductions.md ("Sweeps").
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from bench.repro.sweep import Config, Function, SweepError, call_through_json
from siteagent.cli.console import progress_bar

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "bench" / ".work" / "slurm"
#: Array tasks at most: Slurm's default MaxArraySize is 1001 (indices 0-1000).
MAX_TASKS = 1000
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+")
POLL_S = 1.0


def run_array(
    function: Function,
    configs: Sequence[Config],
    partition: str,
    label: str = "sweep",
    work_dir: Optional[Path] = None,
    sbatch_args: Sequence[str] = (),
) -> List[Any]:
    """Run ``function`` on each configuration as a Slurm array task on ``partition``; the
    results in configuration order."""
    if not _PARTITION.fullmatch(partition):
        raise SweepError(f"--slurm: {partition!r} is not a partition name (letters, digits, _.-)")
    for arg in sbatch_args:
        if not arg.startswith("--"):
            raise SweepError(f"sbatch options are --name=value, got {arg!r}")
    work = _work_dir(work_dir, label)
    tasks = min(len(configs), MAX_TASKS)
    name = f"{function.__module__}:{function.__qualname__}"
    (work / "sweep.json").write_text(
        json.dumps({"function": name, "tasks": tasks, "configs": list(configs)}, indent=1)
    )
    script = work / "task.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from bench.repro.slurm_array import task_main\n"
        f"sys.exit(task_main({str(work)!r}))\n"
    )
    script.chmod(0o755)
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--partition={partition}",
            f"--array=0-{tasks - 1}",
            f"--job-name=repro-{label}"[:60],
            f"--output={work}/task-%a.log",
            f"--chdir={ROOT}",
            "--ntasks=1",
            "--cpus-per-task=1",
            *sbatch_args,
            str(script),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if submitted.returncode != 0:
        raise SweepError(f"sbatch refused the array: {submitted.stderr.strip()}")
    job = submitted.stdout.strip().split(";")[0]
    (work / "job").write_text(job + "\n")
    try:
        return _gather(work, job, len(configs), label)
    except BaseException:
        subprocess.run(["scancel", job], capture_output=True, check=False)
        raise


def _work_dir(work_dir: Optional[Path], label: str) -> Path:
    base = work_dir or WORK
    work = base / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    work.mkdir(parents=True)
    return work


def _gather(work: Path, job: str, count: int, label: str) -> List[Any]:
    """Wait for every result file (or the first error file) of array ``job``."""
    results: Dict[int, Any] = {}
    with progress_bar(f"{label} (Slurm array {job}, {count} runs)") as advance:
        while len(results) < count:
            errors = sorted(work.glob("error-*.txt"))
            if errors:
                raise SweepError(f"Slurm array {job}: {errors[0].name}:\n{errors[0].read_text()}")
            for index in range(count):
                path = work / f"result-{index}.json"
                if index not in results and path.exists():
                    results[index] = json.loads(path.read_text())["result"]
            advance(len(results) / count)
            if len(results) < count:
                if not _alive(job) and not _new_files(work, results, count):
                    missing = [i for i in range(count) if i not in results]
                    raise SweepError(
                        f"Slurm array {job} ended without results for configurations "
                        f"{missing[:10]}{' ...' if len(missing) > 10 else ''}; task logs in {work}"
                    )
                time.sleep(POLL_S)
    return [results[index] for index in range(count)]


def _new_files(work: Path, results: Mapping[int, Any], count: int) -> bool:
    """Whether a result not yet read has appeared (a task may finish between two looks)."""
    return any(
        (work / f"result-{i}.json").exists() for i in range(count) if i not in results
    ) or any(work.glob("error-*.txt"))


def _alive(job: str) -> bool:
    """Whether any task of array ``job`` is still pending or running."""
    listed = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%i"], capture_output=True, text=True, check=False
    )
    # squeue -j on an array that has left the queue fails with "Invalid job id"
    return listed.returncode == 0 and bool(listed.stdout.strip())


def task_main(work_dir: str) -> int:
    """One array task: run the configurations with index ≡ SLURM_ARRAY_TASK_ID (mod tasks)."""
    work = Path(work_dir)
    sweep = json.loads((work / "sweep.json").read_text())
    module, _, qualname = sweep["function"].partition(":")
    function: Any = importlib.import_module(module)
    for part in qualname.split("."):
        function = getattr(function, part)
    task = int(os.environ["SLURM_ARRAY_TASK_ID"])
    for index in range(task, len(sweep["configs"]), sweep["tasks"]):
        try:
            result = call_through_json(function, sweep["configs"][index], index)
        except Exception:
            (work / f"error-{index}.txt").write_text(traceback.format_exc())
            return 1
        partial = work / f".result-{index}.json"
        partial.write_text(json.dumps({"index": index, "result": result}))
        partial.rename(work / f"result-{index}.json")
    return 0
