"""Fixtures of the integration tests: the site the lifecycle tests run against.

``lifecycle_site`` is the SWF replay backend today; to run the same crash and concurrency
tests on real Slurm or the PBS stand-in, parametrize it with a site object of the same shape
(``tests/integration/lifecycle_site.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.lifecycle_site import ReplaySite
from tests.lifecycle import busy_trace


@pytest.fixture
def lifecycle_site(tmp_path: Path) -> Iterator[ReplaySite]:
    """A 64-core simulated cluster about half busy with small jobs, its state in tmp_path."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    replay = ReplaySite(state_dir, busy_trace(tmp_path / "busy.swf", seed=7))
    try:
        yield replay
    finally:
        replay.close()
