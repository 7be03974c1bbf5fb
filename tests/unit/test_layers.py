"""The package's layers, as the README's architecture section draws them: nothing imports a
layer above its own, the client imports only the protocol and the core (and only the command
line imports the client), and no modules import each other in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / "siteagent"

#: Top to bottom: a layer may import the layers below it, never one above.
LAYERS = (
    "cli",
    "daemon",
    "api",
    "agent",
    "market",
    "ledger",
    "http",
    "host",
    "security",
    "config",
    "protocol",
    "pricing",
    "backends",
    "sim",
    "core",
)
#: Beside the agent's layers: the buyer's side, a peer of third-party buyers.
CLIENT_MAY_IMPORT = ("protocol", "core")
#: The one layer that may import the client: ``siteagent-client`` is a command line.
CLIENT_IMPORTED_BY = ("cli",)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Set[str]:
    """The siteagent modules ``path`` imports at run time (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found: Set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            module = absolute(node, module_name(path), path.name == "__init__.py")
            if module == "siteagent":
                found |= {f"siteagent.{alias.name}" for alias in node.names}
            elif module.startswith("siteagent."):
                found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("siteagent.")}
    return found


def absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``importer``
    (so that ``from ..market import store`` cannot slip past the check)."""
    if node.level == 0:
        return node.module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def graph() -> Dict[str, Set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imports(path) & set(modules) - {name} for name, path in modules.items()}


def layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def upward_imports(edges: Dict[str, Set[str]]) -> List[str]:
    """Every import of ``edges`` (module -> modules it imports) that the layers forbid."""
    upward: List[str] = []
    for module, targets in edges.items():
        mine = layer(module)
        for target in targets:
            theirs = layer(target)
            if mine in ("__init__", theirs) or theirs == "__init__":
                continue
            if mine == "client":
                if theirs not in CLIENT_MAY_IMPORT:
                    upward.append(f"{module} -> {target} (the client speaks the protocol only)")
                continue
            assert mine in LAYERS and theirs in (*LAYERS, "client"), f"{module}: new layer?"
            if theirs == "client":
                if mine not in CLIENT_IMPORTED_BY:
                    upward.append(f"{module} -> {target} (only the command line uses the client)")
            elif LAYERS.index(theirs) < LAYERS.index(mine):
                upward.append(f"{module} -> {target}")
    return upward


def test_nothing_imports_a_layer_above_its_own() -> None:
    assert upward_imports(graph()) == []


def test_the_client_may_import_only_the_protocol_and_the_core() -> None:
    allowed = {"siteagent.protocol.signing", "siteagent.core.names", "siteagent.client.sites"}
    for forbidden in (
        "siteagent.market.store",
        "siteagent.config.reading",
        "siteagent.cli.console",
    ):
        edges = {"siteagent.client.quotes": {*allowed, forbidden}}
        assert upward_imports(edges) == [
            f"siteagent.client.quotes -> {forbidden} (the client speaks the protocol only)"
        ]
    assert upward_imports({"siteagent.cli.buyer.quotes": {"siteagent.client.quotes"}}) == []
    assert upward_imports({"siteagent.api.app": {"siteagent.client.quotes"}}) == [
        "siteagent.api.app -> siteagent.client.quotes (only the command line uses the client)"
    ]


def test_relative_imports_are_checked_like_absolute_ones() -> None:
    module = PACKAGE / "client" / "quotes.py"
    tree = ast.parse("from ..market import store\nfrom . import sites\nfrom .fanout import ask_all")
    found = {
        absolute(node, module_name(module), is_package=False)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert found == {"siteagent.market", "siteagent.client", "siteagent.client.fanout"}
    package = PACKAGE / "client" / "__init__.py"
    (node,) = ast.parse("from .sites import Site").body
    assert isinstance(node, ast.ImportFrom)
    assert absolute(node, module_name(package), is_package=True) == "siteagent.client.sites"


def test_no_modules_import_each_other_in_a_circle() -> None:
    edges = graph()
    circles: List[List[str]] = []
    state: Dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: List[str]) -> None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert circles == []
