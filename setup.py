"""Build hook: compile the hot modules with mypyc when a C compiler is at hand.

The modules stay ordinary typed Python (the code you read is the code that runs); mypyc turns
them into C extensions that replay traces about twice as fast, and let the genetic planner
fit its plans' tasks to slots (``core/slots``) faster. Set SITEAGENT_PURE_PYTHON=1 to
skip compilation; if compiling fails (no compiler, no Python headers) the install goes on in
pure Python and says so.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

HOT_MODULES = [
    "siteagent/core/profile.py",
    "siteagent/core/machine.py",
    "siteagent/core/blocks.py",
    "siteagent/core/node_selection.py",
    "siteagent/core/nodes.py",
    "siteagent/core/backfill.py",
    "siteagent/core/engines.py",
    "siteagent/core/prediction.py",
    "siteagent/core/replan.py",
    "siteagent/core/slots.py",
    "siteagent/sim/swf.py",
    "siteagent/sim/simulator.py",
    "siteagent/sim/workload.py",
    "siteagent/sim/shapes.py",
    "siteagent/sim/topology.py",
]


class OptionalBuildExt(build_ext):  # type: ignore[misc]
    """Build the extensions if possible; pure Python is slower but correct."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            self._fallback(exc)

    def build_extension(self, ext: object) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._fallback(exc)

    @staticmethod
    def _fallback(exc: Exception) -> None:
        sys.stderr.write(
            f"siteagent: compiling the hot modules failed ({exc}); installing pure Python "
            "(correct, about half as fast)\n"
        )


def extensions() -> list:  # type: ignore[type-arg]
    if os.environ.get("SITEAGENT_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.stderr.write("siteagent: mypyc not available; installing pure Python\n")
        return []
    return mypycify(HOT_MODULES, opt_level="3")


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
