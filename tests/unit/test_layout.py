"""Where test code lives: helpers in ``testbed``, tests in ``tests``, and no test leaning on
another.

A test module that imports another test module runs that module's fixtures and tests as a
side effect of being collected, and ties two files together that nobody reads together;
``bench`` and ``testbed`` importing ``tests`` would make the suite a library. So shared
functions live in the ``testbed`` package, shared fixtures in conftest.py files, and files
under tests/ are only tests, conftests and package markers. Checked on the source (``ast``),
so that a violation fails here whether or not the import ever runs.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Tuple

REPO = Path(__file__).resolve().parents[2]


def python_files(top: str) -> List[Path]:
    return sorted((REPO / top).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path, module: str) -> Iterator[Tuple[int, str]]:
    """Every module an ``import`` in this file (the module named ``module``) may name
    (``from a import b``: ``a`` and ``a.b``), relative imports resolved, with its line."""
    package = module.split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and (parts[-1].startswith("test_") or parts[-1] == "conftest")


def is_under_tests(name: str) -> bool:
    return name == "tests" or name.startswith("tests.")


def imports_where(top: str, forbidden: str) -> List[str]:
    """``file:line imports module`` for every import under ``top`` that ``forbidden``
    (``"test module"`` or ``"tests"``) rules out."""
    rule = is_test_module if forbidden == "test module" else is_under_tests
    return [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in python_files(top)
        for line, name in imported_names(path, module_name(path))
        if rule(name)
    ]


def test_no_test_module_imports_a_test_module_or_conftest() -> None:
    assert imports_where("tests", "test module") == []


def test_tests_hold_only_tests_conftests_and_package_markers() -> None:
    """Shared functions belong in testbed/, where tests and bench/ both import them."""
    helpers = [
        str(path.relative_to(REPO))
        for path in python_files("tests")
        if not (path.name.startswith("test_") or path.name in ("conftest.py", "__init__.py"))
    ]
    assert helpers == []


def test_bench_never_imports_tests() -> None:
    assert imports_where("bench", "tests") == []


def test_the_support_package_never_imports_tests() -> None:
    assert imports_where("testbed", "tests") == []


def test_the_checks_see_imports_of_every_form(tmp_path: Path) -> None:
    """The scanner itself: plain, from, from-package and relative imports are all seen."""
    source = tmp_path / "probe.py"
    source.write_text(
        "import tests.unit.test_store\n"
        "from tests.integration.pbs.conftest import StartStandin\n"
        "from tests.unit import test_store\n"
        "from siteagent.core import model\n",
        encoding="utf-8",
    )
    names = [name for _, name in imported_names(source, "tests.unit.probe")]
    assert [n for n in names if is_test_module(n)] == [
        "tests.unit.test_store",
        "tests.integration.pbs.conftest",
        "tests.unit.test_store",
    ]
    relative = tmp_path / "relative.py"
    relative.write_text("from .test_store import requested\nfrom .. import conftest\n")
    names = [name for _, name in imported_names(relative, "tests.unit.relative")]
    assert "tests.unit.test_store" in names and "tests.conftest" in names


def test_the_support_package_is_grouped_by_how_a_test_uses_it() -> None:
    """testbed/ keeps its modules in groups (docs in testbed/__init__.py), not flat."""
    groups = {"inprocess", "processes", "slurm", "pbs", "sims", "standins"}
    loose = sorted(
        path.name
        for path in (REPO / "testbed").iterdir()
        if path.suffix == ".py" and path.name not in ("__init__.py", "compiled.py")
    )
    assert loose == []
    assert {
        p.name for p in (REPO / "testbed").iterdir() if p.is_dir() and p.name != "__pycache__"
    } == groups


def test_every_harness_module_says_when_to_use_it() -> None:
    """A newcomer picks a harness by its first docstring line (issue 28)."""
    silent = [
        str(path.relative_to(REPO))
        for group in ("inprocess", "processes", "slurm", "pbs", "sims")
        for path in sorted((REPO / "testbed" / group).glob("*.py"))
        if not (ast.get_docstring(ast.parse(path.read_text())) or "").startswith("Use this when")
    ]
    assert silent == []
