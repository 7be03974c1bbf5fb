"""A reproduction's report: one row per result ID of the paper, written as
bench/results/repro-NAME.json (every per-seed value and summary) and .md (result | paper |
ours ± CI, n | verdict | why), with the figures beside them.

A module adds a row for every ID of its seed (``judge``, ``row`` or ``not_run``), its raw
per-seed data (``data``), calibrations, extra sections and figures, then calls ``finish``,
which writes both files, prints the table (or JSON with ``--json``) and returns the exit
code: 1 if a row is missing, names no paper value, or lacks the why its verdict needs.
See docs/reproductions.md ("Reports").
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

from bench.common import ended, machine, running_compiled
from bench.repro.options import Options
from bench.repro.paper_values import paper_value, seed_ids
from bench.repro.stats import Estimate
from bench.repro.verdicts import NEED_WHY, NOT_AVAILABLE, NOT_RUN, Verdict, judge
from siteagent.cli import console
from siteagent.sim.calibration import Calibration

COLUMNS = ("id", "result", "paper", "ours", "verdict", "why")
HEADERS = {"ours": "ours (95 % CI), n"}


@dataclass
class Row:
    """One line of the report: a paper value (``id``, ``point``) against our estimate."""

    id: str
    verdict: str
    why: str = ""
    point: Optional[str] = None
    ours: Optional[Estimate] = None
    ours_text: str = ""
    result: str = ""
    paper: str = ""

    def to_dict(self) -> Dict[str, Any]:
        entry = paper_value(self.id)
        has_value = self.point is not None or len(entry.values) == 1
        band = entry.band(self.point) if has_value else None
        return {
            "id": self.id,
            "point": self.point,
            "result": self.result,
            "paper": self.paper,
            "paper_value": entry.value(self.point) if has_value else None,
            "paper_band": list(band) if band else None,
            "source": entry.source,
            "ours": self.ours.to_dict() if self.ours else None,
            "ours_text": self.ours_text,
            "verdict": self.verdict,
            "why": self.why,
        }


@dataclass
class Report:
    """The report of ``python -m bench repro-NAME``; ``seed``: the paper ("000" ... "004")
    whose every result ID must appear."""

    name: str
    title: str
    options: Options
    seed: str
    #: the command that writes it, when not ``repro-NAME`` (a part: ``repro-singh fees``)
    command: str = ""
    rows: List[Row] = field(default_factory=list)
    #: free-form per-seed data (lists of per-run dicts): the JSON keeps all of it
    data: Dict[str, Any] = field(default_factory=dict)
    calibrations: List[Dict[str, Any]] = field(default_factory=list)
    sections: List[str] = field(default_factory=list)
    figures: List[str] = field(default_factory=list)
    began: float = field(default_factory=time.perf_counter)
    #: the machine and its load when the run began (the report is written at its end)
    started: Dict[str, Any] = field(default_factory=machine)
    #: a re-analysis (``--reanalyse``): the original run's machine, seconds and engines, which
    #: the report keeps instead of the re-analysis's own
    ran: Dict[str, Any] = field(default_factory=dict)

    # -- rows ---------------------------------------------------------------------------------

    def judge(
        self,
        result_id: str,
        ours: Optional[Estimate] = None,
        point: Optional[str] = None,
        change: Optional[Estimate] = None,
        why: str = "",
        result: str = "",
    ) -> Row:
        """A row whose verdict verdicts.judge gives (match / trend / differs)."""
        verdict = judge(paper_value(result_id), ours, point, change, why)
        shown = ours if ours is not None else change
        return self.row(result_id, verdict, shown, point, result=result)

    def row(
        self,
        result_id: str,
        verdict: Union[Verdict, str],
        ours: Union[Estimate, str, None] = None,
        point: Optional[str] = None,
        why: str = "",
        result: str = "",
        paper: str = "",
    ) -> Row:
        """A row with a verdict decided by the module (a compound acceptance, a count)."""
        if isinstance(verdict, str):
            verdict = Verdict(verdict, why)
        entry = paper_value(result_id)
        if point is not None:
            entry.point(point)  # a point the entry does not have is an error now, not later
        estimate = ours if isinstance(ours, Estimate) else None
        row = Row(
            id=result_id,
            verdict=verdict.verdict,
            why=verdict.why or why,
            point=point,
            ours=estimate,
            ours_text=estimate.text() if estimate else (ours or ""),
            result=result or entry.result + (f" [{point}]" if point else ""),
            paper=paper or entry.display(point),
        )
        self.rows.append(row)
        return row

    def not_run(self, result_ids: Iterable[str], why: str) -> None:
        """Rows this run does not measure (``--quick``, a part left out): verdict "not run",
        or "n/a" for results whose data is gone (paper_values.yaml says why)."""
        for result_id in result_ids:
            unavailable = paper_value(result_id).unavailable
            if unavailable:
                self.row(result_id, NOT_AVAILABLE, why=unavailable)
            else:
                self.row(result_id, NOT_RUN, why=why)

    def calibration(self, label: str, calibration: Calibration) -> None:
        """Record a load calibration (target and achieved) for the report."""
        self.calibrations.append(
            {
                "label": label,
                "target": calibration.target,
                "achieved": calibration.achieved,
                "converged": calibration.converged,
                "overlay_probability": calibration.scaling.overlay_probability,
                "interarrival_factor": calibration.scaling.interarrival_factor,
                "steps": len(calibration.steps),
            }
        )

    def section(self, title: str, markdown: str) -> None:
        """Extra Markdown after the results table (setup, choices where the paper is silent)."""
        self.sections.append(f"## {title}\n\n{markdown.strip()}\n")

    def figure_path(self, name: str) -> Path:
        """Where figure ``name`` goes (repro-NAME-name.png beside the report); listed in it."""
        file = f"repro-{self.name}-{name}.png"
        if file not in self.figures:
            self.figures.append(file)
        return self.options.out / file

    # -- output -------------------------------------------------------------------------------

    def problems(self) -> List[str]:
        """What makes the report incomplete: missing rows, verdicts without their why."""
        found = {row.id for row in self.rows}
        out = [
            f"{rid}: no row (every result of seed {self.seed} needs one)"
            for rid in seed_ids(self.seed)
            if rid not in found
        ]
        out += [
            f"{row.id}{'/' + row.point if row.point else ''}: verdict {row.verdict} without a why"
            for row in self.rows
            if row.verdict in NEED_WHY and not row.why.strip()
        ]
        return out

    def to_dict(self) -> Dict[str, Any]:
        own = {
            "machine": ended(self.started),
            "compiled": running_compiled(),
            "seconds": round(time.perf_counter() - self.began, 1),
        }
        return {
            "name": self.name,
            "title": self.title,
            "seed": self.seed,
            **own,
            **{key: self.ran[key] for key in own if key in self.ran},
            **({"reanalysed": own["machine"]["date"]} if self.ran else {}),
            "options": self.options.to_dict(),
            "rows": [row.to_dict() for row in self.rows],
            "calibrations": self.calibrations,
            "data": self.data,
            "figures": self.figures,
            "problems": self.problems(),
        }

    def markdown(self, document: Dict[str, Any]) -> str:
        where, options = document["machine"], self.options
        lines = [
            f"# {self.title}",
            "",
            f"`python -m bench {self.command or 'repro-' + self.name}`, run {where['date']} "
            f"on {where['cpus']} CPUs "
            f"(load average {where['load_average_1m_at_start']} at start"
            + (
                f", {where['load_average_1m_at_end']} at the end"
                if "load_average_1m_at_end" in where
                else ""
            )
            + "), "
            f"{'compiled' if document['compiled'] else 'pure Python'} engines, "
            f"{options.seeds} paired seeds{' (--quick)' if options.quick else ''}, "
            f"{document['seconds']:.0f} s. Every per-seed value is in repro-{self.name}.json."
            + (
                f" Re-analysed {document['reanalysed']} from that run's per-seed values."
                if "reanalysed" in document
                else ""
            ),
            "",
            "Verdicts (docs/reproductions.md): **match**: the paper's value is in our 95 % CI "
            "or ours within the row's tolerance; **trend**: the CI of the paired change "
            "excludes 0 in the paper's direction; **differs**: neither, and why.",
            "",
        ]
        table = [{**row.to_dict(), "ours": row.ours_text or "-"} for row in self.rows]
        lines.append(_md_table(table))
        if self.calibrations:
            lines += [
                "",
                "## Load calibration",
                "",
                "Best-effort utilization measured over the paper's window (targets from "
                "the paper).",
                "",
            ]
            lines.append(
                _md_table(
                    self.calibrations,
                    (
                        "label",
                        "target",
                        "achieved",
                        "converged",
                        "overlay_probability",
                        "interarrival_factor",
                        "steps",
                    ),
                )
            )
        for section in self.sections:
            lines += ["", section]
        if self.figures:
            lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in self.figures]
        problems = document["problems"]
        if problems:
            lines += ["", "## Incomplete", ""] + [f"- {p}" for p in problems]
        return "\n".join(lines).rstrip() + "\n"

    def finish(self) -> int:
        """Write repro-NAME.json and .md, print the table (or the JSON), return the exit code."""
        document = _finite(self.to_dict())
        out = self.options.out
        out.mkdir(parents=True, exist_ok=True)
        json_path, md_path = out / f"repro-{self.name}.json", out / f"repro-{self.name}.md"
        json_path.write_text(json.dumps(document, indent=2, sort_keys=True, default=_plain) + "\n")
        md_path.write_text(self.markdown(document))
        if self.options.json:
            console.print_json(document)
        else:
            console.print_table(
                [{**row.to_dict(), "ours": row.ours_text or "-"} for row in self.rows],
                COLUMNS,
                title=self.title,
                headers=HEADERS,
            )
            console.stdout.print(f"wrote {json_path} and {md_path}", highlight=False)
        for problem in document["problems"]:
            console.error(f"repro-{self.name}: {problem}")
        return 1 if document["problems"] else 0


def _md_table(rows: List[Dict[str, Any]], columns: Iterable[str] = COLUMNS) -> str:
    columns = list(columns)
    head = [HEADERS.get(c, c) for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [_cell(row.get(c)) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _finite(value: Any) -> Any:
    """nan and ±inf as null: strict JSON readers (jq, browsers) refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    if hasattr(value, "to_dict"):
        return _finite(value.to_dict())
    return value


def _plain(value: Any) -> Any:
    """JSON for what json cannot write itself (dataclasses with to_dict, paths)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)
