"""tests/setup/lowest-constraints pins every runtime dependency at its lower bound.

./test runs the unit, API and service tests a second time with these pins, so they are what
the ranges in pyproject.toml are tested at. The ranges are read here independently of the
script (with ``packaging``, pip's own reading), so a dependency the script leaves out or pins
elsewhere than its lower bound fails here rather than going untested.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Dict

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "setup" / "lowest-constraints"

PROJECT: Dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: What users install: the dependencies and the optional extras that run something.
RUNTIME_EXTRAS = ("client", "postgres")
RUNTIME = [Requirement(line) for line in PROJECT["dependencies"]] + [
    Requirement(line)
    for extra in RUNTIME_EXTRAS
    for line in PROJECT["optional-dependencies"][extra]
]
DEV = [Requirement(line) for line in PROJECT["optional-dependencies"]["dev"]]


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def pins(output: str) -> Dict[str, Requirement]:
    """The constraints by distribution name; each must be one ``==`` pin, named once."""
    pinned: Dict[str, Requirement] = {}
    for line in output.splitlines():
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name not in pinned, f"{name} is pinned twice"
        assert [spec.operator for spec in requirement.specifier] == ["=="], line
        assert not requirement.extras, line
        pinned[name] = requirement
    return pinned


def lower_bound(requirement: Requirement) -> Version:
    bounds = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
    assert len(bounds) == 1, f"{requirement} needs one >= lower bound"
    return bounds[0]


def pinned_version(requirement: Requirement) -> Version:
    return Version(next(iter(requirement.specifier)).version)


def test_every_runtime_dependency_is_pinned_at_its_lower_bound() -> None:
    result = run_script()
    assert result.returncode == 0, result.stderr
    pinned = pins(result.stdout)
    assert RUNTIME
    for requirement in RUNTIME:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not tested at its lowest version"
        assert pinned_version(pinned[name]) == lower_bound(requirement), name
        assert pinned[name].marker == requirement.marker, name


def test_the_client_extra_is_pinned_and_installed_by_the_lowest_stage() -> None:
    """The workflow planners' dependencies are an extra, not in the base install; ./test
    installs it in both environments, so its lower bounds are tested like the others."""
    pinned = pins(run_script().stdout)
    for line in [
        *PROJECT["optional-dependencies"]["client"],
        *PROJECT["optional-dependencies"]["postgres"],
    ]:
        requirement = Requirement(line)
        assert pinned_version(pinned[canonicalize_name(requirement.name)]) == lower_bound(
            requirement
        )
    test_script = (ROOT / "test").read_text()
    assert test_script.count("-e '.[dev,client,postgres]'") == 2


def test_the_other_pins_are_dev_dependencies_within_their_ranges() -> None:
    """A pin beyond the runtime set (httpx for Starlette 0.36's TestClient) must still be a
    version the dev extra allows, or the lowest stage would install something else."""
    pinned = pins(run_script().stdout)
    runtime = {canonicalize_name(requirement.name) for requirement in RUNTIME}
    dev = {canonicalize_name(requirement.name): requirement for requirement in DEV}
    assert pinned.keys() - runtime
    for name in pinned.keys() - runtime:
        assert name in dev, f"{name} is pinned but not a dependency"
        assert dev[name].specifier.contains(pinned_version(pinned[name])), name


def test_extras_are_dropped_and_markers_kept(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[project]\n"
        'dependencies = ["uvicorn[standard]>=0.29", '
        "\"tomli>=1.1,<3; python_version < '3.11'\"]\n"
    )
    result = run_script(str(pyproject))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["uvicorn==0.29", "tomli==1.1; python_version < '3.11'"]


@pytest.mark.parametrize("requirement", ["rich", "rich<14", "rich~=13.9", "rich==13.9.4"])
def test_a_dependency_without_a_lower_bound_is_refused(tmp_path: Path, requirement: str) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project]\ndependencies = ["{requirement}"]\n')
    result = run_script(str(pyproject))
    assert result.returncode == 1
    assert f"{requirement!r} has no >= lower bound" in result.stderr
    assert result.stdout == ""
