"""Small helpers shared by the core's unit tests: writing SWF files by hand, an offer."""

from __future__ import annotations

import gzip
from decimal import Decimal
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from siteagent.core.model import Offer, Request

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


def an_offer(offer_id: str = "o1") -> Offer:
    """A 4-core, one-hour offer at 1000 that expires at 2000, with exact money in it."""
    return Offer(
        id=offer_id,
        request=Request(cores=4, duration=3600, max_price=Decimal("2.50"), deadline=99),
        start=1000,
        duration=3600,
        size=4,
        unit_price=Decimal("1.10"),
        fee=Decimal("0.333"),
        expires=2000,
        site="here",
    )
