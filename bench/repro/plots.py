"""Replicas of the papers' figures: our means with their 95 % CIs as error bars, the paper's
points overlaid (black, hollow), saved as PNG beside the report. See docs/reproductions.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Tuple

from bench.repro.stats import Estimate

#: one series: (x, our estimate at x)
Series = Sequence[Tuple[float, Estimate]]
#: the paper's points: (x, y), or (x, y, tolerance) to draw its tolerance as a bar
PaperSeries = Sequence[Tuple[float, ...]]


def draw_replica(
    axis: Any,
    ours: Mapping[str, Series],
    paper: Mapping[str, PaperSeries] = {},
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
) -> None:
    """Draw on a matplotlib ``axis``: each of our series as a line with CI bars, each of the
    paper's as hollow black markers with its tolerance bars."""
    markers = "osD^vP*X"
    for index, (label, series) in enumerate(ours.items()):
        xs = [x for x, _ in series]
        ys = [e.value for _, e in series]
        below = [max(e.value - e.low, 0.0) if e.low == e.low else 0.0 for _, e in series]
        above = [max(e.high - e.value, 0.0) if e.high == e.high else 0.0 for _, e in series]
        axis.errorbar(
            xs,
            ys,
            yerr=[below, above],
            marker=markers[index % len(markers)],
            capsize=3,
            label=f"ours: {label}",
        )
    for index, (label, points) in enumerate(paper.items()):
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        errors = [p[2] if len(p) > 2 else 0.0 for p in points]
        axis.errorbar(
            xs,
            ys,
            yerr=errors if any(errors) else None,
            linestyle="none",
            marker=markers[index % len(markers)],
            markerfacecolor="none",
            color="black",
            capsize=3,
            label=f"paper: {label}",
        )
    axis.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axis.legend(fontsize="small")


def replica(
    path: Path,
    ours: Mapping[str, Series],
    paper: Mapping[str, PaperSeries] = {},
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    size: Optional[Tuple[float, float]] = None,
) -> Path:
    """One-axis replica saved to ``path`` (``Report.figure_path(name)`` gives it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=size or (6.4, 4.2))
    draw_replica(axis, ours, paper, xlabel, ylabel, title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
