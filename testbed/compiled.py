"""Which mypyc-compiled modules are older than their sources: tests would run the old code
(tests/conftest.py refuses to start then)."""

from __future__ import annotations

from pathlib import Path
from typing import List


def stale_compiled_modules(package: Path) -> List[str]:
    """Modules whose mypyc extension (``name.cpython-*.so``) is older than ``name.py``."""
    stale = []
    for extension in package.rglob("*.so"):
        source = extension.with_name(extension.name.split(".")[0] + ".py")
        if source.exists() and source.stat().st_mtime > extension.stat().st_mtime:
            stale.append(str(source.relative_to(package.parent)))
    return sorted(stale)
