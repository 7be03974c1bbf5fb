"""The pyslurm backend on Slurm 24.11, with the real pyslurm 24.11.0, inside the trixie chroot.

pyslurm 24.11 links trixie's libslurm, which needs trixie's C library and Python: it cannot be
imported here. So tests/integration/test_pyslurm_cluster.py (the pyslurm backend's tests on a
real cluster, which this process runs on the host's 22.05) runs again in the chroot, with the
chroot's Python and the venv tests/setup/build-pyslurm-chroot made there (pyslurm 24.11.0,
siteagent's runtime dependencies, pytest), on a copy of this tree's sources: there 24.11 is the
host's Slurm, so the module starts its own 24.11 cluster and checks the pyslurm backend against
the command backend as it does here. The test passes only if every one of its tests passed and
none was skipped. Slurm 26.05 has no pyslurm release: it is tested through its commands only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from testbed.processes.programs import unavailable
from testbed.slurm.install import SlurmInstall

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_series("24.11")]

REPO = Path(__file__).resolve().parents[2]
VENV = "/opt/siteagent-venv"


@pytest.fixture
def chroot_sources(slurm_version: SlurmInstall) -> Iterator[Path]:
    """A copy of the package, the testbed and the tests in the chroot (Python sources and data:
    the compiled modules are the host Python's)."""
    if not (slurm_version.root / VENV.lstrip("/") / "bin" / "python").exists():
        unavailable(f"no {VENV} in {slurm_version.root}; tests/setup/build-pyslurm-chroot makes it")
    where = Path(tempfile.mkdtemp(prefix="siteagent-src-", dir=slurm_version.tmp_dir()))
    ignore = shutil.ignore_patterns("*.so", "__pycache__", ".work", "results")
    for part in ("siteagent", "testbed", "tests", "contrib", "pyproject.toml"):
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, where / part, ignore=ignore)
        else:
            shutil.copy2(source, where / part)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_the_pyslurm_backend_on_slurm_24_11(
    slurm_version: SlurmInstall, chroot_sources: Path
) -> None:
    inner = slurm_version.inside(chroot_sources)
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "PYTHONPATH": inner,
        "SLURM_VERSIONS": "host",
        "CI": os.environ.get("CI", ""),
        "LC_ALL": "C.UTF-8",
    }
    args = [
        f"{VENV}/bin/python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "tests/integration/test_pyslurm_cluster.py",
    ]
    done = subprocess.run(
        slurm_version.daemon(args, cwd=inner),
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    report = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    summary = done.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 10, report
    assert "skipped" not in summary and "failed" not in summary, report
