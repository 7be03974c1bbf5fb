"""Every reproduction command runs with --quick, as a user runs it, and its report holds a row
for every headline result of its paper (``quick_run``, tests/bench/conftest.py). A command
joins this test by being registered (bench/repro/registry.py); repro-singh's whole run is
checked after its parts in tests/bench/test_repro_singh.py, where it reads their kept runs
back instead of running them a second time."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from bench.repro.registry import available

#: Checked in tests/bench/test_repro_singh.py, after its parts.
AFTER_ITS_PARTS = "repro-singh"
COMMANDS = sorted(name for name in available() if name != AFTER_ITS_PARTS)


@pytest.mark.parametrize(
    "name", COMMANDS or [pytest.param("none", marks=pytest.mark.skip("no repro command yet"))]
)
def test_quick_run_reports_every_result_of_its_paper(
    name: str, tmp_path: Path, quick_run: Callable[..., None]
) -> None:
    quick_run(name, tmp_path)
