"""Every error code is registered once (siteagent/protocol/errors.py): each SiteagentError
class's code and each ``code`` literal in the package is in STATUS or CLIENT_ONLY, every
exception class is under the root, and every subclass takes the root's constructor convention
(``message`` first, everything else keyword-only). README "Developing": add an error code."""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import pkgutil
from pathlib import Path
from typing import Iterator, List, Set, Tuple, Type

import pytest

import siteagent
from siteagent.core.errors import SiteagentError
from siteagent.protocol.errors import CLIENT_ONLY, STATUS, status_of

PACKAGE = Path(siteagent.__file__).parent
REGISTERED = set(STATUS) | set(CLIENT_ONLY)

#: Exceptions outside the root, each with why. The compiled hot modules (setup.py's
#: HOT_MODULES) keep a builtin base: a mypyc native class cannot inherit an interpreted one.
NOT_UNDER_ROOT = {
    "siteagent.sim.swf.SwfError": "compiled (mypyc)",
    "siteagent.sim.workload.UnsimulableJob": "compiled (mypyc)",
    "siteagent.core.scheduling.ReservationConflict": "compiled (mypyc); a signal inside the core",
    "siteagent.protocol.sessions.AnswerTooLarge": "a transport signal; the connection reports it",
    "siteagent.protocol.sessions.DeadlinePassed": "a transport signal; the connection reports it",
    "siteagent.http.limits.TooLarge": "a signal inside the ASGI limits; answered there",
    "siteagent.client.commit.Interrupted": "control flow: the user asked to stop",
}

#: Subclasses that build their message from the one object they report (no message to pass).
BUILT_FROM_ONE_OBJECT = {
    "siteagent.config.reading.ConfigError",
    "siteagent.market.deals.PaymentRefused",
    "siteagent.market.reservations.ReservationFailed",
    "siteagent.market.store.StaleState",
}


def import_everything() -> None:
    for module in pkgutil.walk_packages([str(PACKAGE)], prefix="siteagent."):
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as exc:  # an optional library (pyslurm): not ours to check
            if (exc.name or "").startswith("siteagent"):
                raise


def subclasses(cls: Type[BaseException]) -> Iterator[Type[BaseException]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def ours(cls: type) -> bool:
    return cls.__module__.startswith("siteagent.")


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@pytest.fixture(scope="module")
def error_classes() -> List[Type[SiteagentError]]:
    import_everything()
    return [SiteagentError, *(cls for cls in subclasses(SiteagentError) if ours(cls))]


def test_every_error_class_code_is_registered(error_classes: List[Type[SiteagentError]]) -> None:
    assert len(error_classes) > 40  # the walk found the package's classes
    unregistered = {qualified(cls): cls.code for cls in error_classes if cls.code not in REGISTERED}
    assert unregistered == {}


def code_literals(tree: ast.AST) -> Iterator[Tuple[int, str]]:
    """(line, code) of every ``code = "x"``, ``code: str = "x"``, ``code="x"`` and
    ``def f(..., code="x")`` in ``tree``."""
    for node in ast.walk(tree):
        values: List[ast.expr] = []
        if isinstance(node, ast.keyword) and node.arg == "code":
            values.append(node.value)
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == "code" for t in node.targets):
                values.append(node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            if isinstance(node.target, ast.Name) and node.target.id == "code":
                values.append(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            named = [*arguments.posonlyargs, *arguments.args]
            pairs = list(zip(named[len(named) - len(arguments.defaults) :], arguments.defaults))
            pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d]
            values += [default for arg, default in pairs if arg.arg == "code"]
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield value.lineno, value.value


def unregistered_literals(root: Path) -> Set[str]:
    found = set()
    for path in sorted(root.rglob("*.py")):
        for line, code in code_literals(ast.parse(path.read_text(encoding="utf-8"))):
            if code not in REGISTERED:
                found.add(f"{path.relative_to(root.parent)}:{line}: {code!r}")
    return found


def test_every_code_literal_in_the_package_is_registered() -> None:
    assert unregistered_literals(PACKAGE) == set()


def test_a_typo_in_a_code_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "siteagent"
    package.mkdir()
    (package / "typo.py").write_text(
        'class Gone(SiteagentError):\n    code = "unknown_ofer"\n\n'
        'raise SiteagentError("x", code="unknown_ofer")\n'
        'def bad(code="invlid_answer"): ...\n'
    )
    assert unregistered_literals(package) == {
        "siteagent/typo.py:2: 'unknown_ofer'",
        "siteagent/typo.py:4: 'unknown_ofer'",
        "siteagent/typo.py:5: 'invlid_answer'",
    }


def test_every_exception_class_is_under_the_root(
    error_classes: List[Type[SiteagentError]],
) -> None:
    everything = [cls for cls in subclasses(BaseException) if ours(cls)]
    stray = {qualified(cls) for cls in everything if not issubclass(cls, SiteagentError)}
    assert stray == set(NOT_UNDER_ROOT)


def test_every_subclass_takes_the_roots_constructor(
    error_classes: List[Type[SiteagentError]],
) -> None:
    """``message`` first; ``code`` and every extra keyword-only."""
    odd = []
    for cls in error_classes:
        if "__init__" not in vars(cls) or qualified(cls) in BUILT_FROM_ONE_OBJECT:
            continue
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
        positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        if positional != ["message"]:
            odd.append(f"{qualified(cls)}{inspect.signature(cls.__init__)}")
    assert odd == []


def test_an_unregistered_code_is_answered_500_and_logged_at_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="siteagent.errors"):
        assert status_of("unknown_ofer") == 500
        assert status_of("unknown_offer") == 404
        assert status_of("unreachable") == 500  # client-only: no status, but no bug either
    assert [record.getMessage() for record in caplog.records] == [
        "error code 'unknown_ofer' is in neither STATUS nor CLIENT_ONLY (a bug)"
    ]


def test_client_only_codes_have_no_status() -> None:
    assert set(STATUS) & set(CLIENT_ONLY) == set()
