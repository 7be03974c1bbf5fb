"""What a site installs: the sdist and the wheel, built as a release builds them (``python -m
build``: the sdist, then the wheel from the sdist, so a file the sdist forgets fails here), and
the wheel installed into a fresh virtual environment, where the commands run, the sample
configuration passes ``check-config``, and ``install-service`` finds every file it installs
inside the wheel (under ``<prefix>/share/siteagent``), not in a checkout.

The wheel is built pure Python (``SITEAGENT_PURE_PYTHON=1``): compiling the hot modules is the
same with or without this packaging, and takes minutes on a small CI machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from siteagent.host import installation

REPO = Path(__file__).resolve().parents[2]

#: The site files a wheel must carry, as they lie in the repository.
SITE_FILES = (
    "systemd/siteagent.service",
    "systemd/siteagent.env.example",
    "contrib/siteagent.yaml",
    "contrib/slurm/resv-notify",
    "contrib/slurm/job_submit.lua",
    "contrib/pbs/siteagent_hook.py",
    "contrib/prometheus/siteagent-rules.yml",
    "contrib/grafana/siteagent-dashboard.json",
)


def run(
    args: List[str], cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel of the tree as it is (tracked and new files, not ignored ones)."""
    source = tmp_path_factory.mktemp("source")
    listed = run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO)
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "SITEAGENT_PURE_PYTHON": "1"}
    run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], env=env)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed (and its dependencies)."""
    home = tmp_path_factory.mktemp("venv") / "siteagent"
    run([sys.executable, "-m", "venv", str(home)])
    [wheel] = dist.glob("siteagent-*.whl")
    run([str(home / "bin" / "pip"), "install", "--quiet", str(wheel)])
    return home


def test_the_sdist_and_the_wheel_carry_the_site_files(dist: Path) -> None:
    [sdist] = dist.glob("siteagent-*.tar.gz")
    with tarfile.open(sdist) as archive:
        packed = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    [wheel] = dist.glob("siteagent-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shared = {
            name.split("/data/share/siteagent/", 1)[1]
            for name in archive.namelist()
            if "/data/share/siteagent/" in name
        }
    for name in SITE_FILES:
        assert name in packed, f"{name} is missing from the sdist"
        assert name in shared, f"{name} is missing from the wheel"


def siteagent(venv: Path, *args: str, state: Path) -> subprocess.CompletedProcess[str]:
    """The installed `siteagent`, outside the checkout, its state directory in the test's."""
    env = {**os.environ, "STATE_DIRECTORY": str(state)}
    return run([str(venv / "bin" / "siteagent"), *args], cwd=state.parent, env=env)


def test_check_config_passes_on_the_sample_in_a_fresh_venv(venv: Path, tmp_path: Path) -> None:
    sample = tmp_path / "siteagent.yaml"
    sample.write_text((REPO / "contrib" / "siteagent.yaml").read_text())
    sample.chmod(0o644)
    done = siteagent(venv, "check-config", str(sample), "--json", state=tmp_path / "state")
    assert json.loads(done.stdout)["ok"] is True


def test_install_service_takes_its_files_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    config = tmp_path / "siteagent.yaml"
    config.write_text("backend: {type: slurm}\nnotifications: {socket: /run/sa/n.sock}\n")
    config.chmod(0o644)
    destdir = tmp_path / "root"
    args = ["install-service", "--config", str(config), "--destdir", str(destdir), "--json"]
    done = siteagent(venv, *args, state=tmp_path / "state")
    rows: Dict[str, str] = {row["file"]: row["action"] for row in json.loads(done.stdout)["files"]}
    assert set(rows.values()) == {"install"}
    shared = next(venv.glob("share/siteagent"))
    prolog = installation.staged(installation.LIBEXEC / "slurm-resv-prolog", destdir)
    expected = installation.set_constant(
        (shared / "contrib" / "slurm" / "resv-notify").read_text(), "SOCKET", "/run/sa/n.sock"
    )
    assert prolog.read_text() == expected
    unit = installation.staged(Path("/etc/systemd/system/siteagent.service"), destdir)
    assert f"ExecStart={venv / 'bin' / 'siteagent'} serve --config {config}\n" in unit.read_text()
