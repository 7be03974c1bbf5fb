"""Use this when a test needs a small SWF trace written by hand.

SWF traces written by hand for the tests: a few jobs, a busy stream, a bundled trace's start.

``write_trace``/``busy_trace`` build the small clusters the lifecycle tests replay (jobs as
tuples); ``swf_row``/``write_swf`` build records field by field for the parser's and the
simulator's tests.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

TRACES = Path(__file__).resolve().parents[2] / "traces"


def swf_row(
    job: int,
    submit: int,
    run: int,
    procs: int,
    req_procs: int = -1,
    req_time: int = -1,
    wait: int = -1,
) -> List[int]:
    """An 18-field SWF record with the fields the simulator reads; the rest unknown (-1)."""
    return [
        job,
        submit,
        wait,
        run,
        procs,
        -1,
        -1,
        req_procs,
        req_time,
        -1,
        1,
        -1,
        -1,
        -1,
        -1,
        -1,
        -1,
        -1,
    ]


def swf_text(rows: Iterable[Sequence[object]], header: Sequence[str] = ()) -> str:
    lines = list(header)
    lines.extend(" ".join(str(cell) for cell in row) for row in rows)
    return "\n".join(lines) + "\n"


def write_swf(
    path: Path,
    rows: Iterable[Sequence[object]],
    max_procs: Optional[int] = None,
    header: Sequence[str] = (),
) -> Path:
    """Write an SWF file (gzipped if the name ends in .gz) with an optional MaxProcs line."""
    lines = ["; Version: 2.2", "; Computer: test cluster"]
    if max_procs is not None:
        lines.append(f"; MaxProcs: {max_procs}")
    lines.extend(header)
    text = swf_text(rows, lines)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="latin-1") as handle:
            handle.write(text)
    else:
        Path(path).write_text(text, encoding="latin-1")
    return Path(path)


def trace_prefix(name: str, jobs: int, path: Path) -> Path:
    """The header and the first ``jobs`` records of a bundled trace, as a plain SWF file."""
    out: List[str] = []
    count = 0
    with gzip.open(TRACES / name, "rt", encoding="latin-1") as handle:
        for line in handle:
            if line.lstrip().startswith(";") or not line.strip():
                out.append(line)
                continue
            if count == jobs:
                break
            out.append(line)
            count += 1
    Path(path).write_text("".join(out), encoding="latin-1")
    return Path(path)


#: An SWF job: (submit, run time, processors, requested time), seconds from the trace start.
SwfJob = Tuple[int, int, int, int]


def write_trace(path: Path, jobs: Iterable[SwfJob], max_procs: int) -> str:
    """A plain SWF file with these jobs (the fields the simulator reads; the rest -1)."""
    lines = ["; Version: 2.2", "; Computer: lifecycle test cluster", f"; MaxProcs: {max_procs}"]
    for number, (submit, run, procs, req_time) in enumerate(jobs, start=1):
        fields = [number, submit, -1, run, procs, -1, -1, procs, req_time]
        lines.append(" ".join(str(v) for v in fields + [-1, 1] + [-1] * 7))
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")
    return str(path)


def busy_trace(path: Path, seed: int, cores: int = 64, jobs: int = 4000) -> str:
    """A steady stream of small jobs (about half the machine busy) for tests that need a
    living cluster: jobs start and end while reservations come and go."""
    rng = random.Random(seed)
    rows: List[SwfJob] = []
    t = 0
    for _ in range(jobs):
        t += rng.randint(1, 12)
        run = rng.randint(10, 240)
        rows.append((t, run, rng.randint(1, cores // 8), run + rng.randint(0, 120)))
    return write_trace(path, rows, cores)
