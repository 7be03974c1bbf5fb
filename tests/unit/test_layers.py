"""The package's layers, as the README's architecture section draws them: nothing imports a
layer above its own, the client imports only the protocol and the core, and no modules import
each other in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / "siteagent"

#: Top to bottom: a layer may import the layers below it, never one above.
LAYERS = (
    "cli",
    "serve",
    "api",
    "agent",
    "market",
    "ledger",
    "serving",
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
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "siteagent":
                found |= {f"siteagent.{alias.name}" for alias in node.names}
            elif node.module.startswith("siteagent."):
                found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("siteagent.")}
    return found


def graph() -> Dict[str, Set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imports(path) & set(modules) - {name} for name, path in modules.items()}


def layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def test_nothing_imports_a_layer_above_its_own() -> None:
    upward: List[str] = []
    for module, targets in graph().items():
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
            if theirs == "client" or LAYERS.index(theirs) < LAYERS.index(mine):
                upward.append(f"{module} -> {target}")
    assert upward == []


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
