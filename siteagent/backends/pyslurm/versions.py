"""Which pyslurm releases the backend works with, and the refusal of the others.

pyslurm ``X.Y.*`` is built for Slurm ``X.Y`` (pyslurm 22.5 for Slurm 22.05) and works only with
that Slurm's libslurm. Every release from 22.5 on has the object API the backend reads jobs and
nodes through (``pyslurm.Jobs``/``pyslurm.Nodes``); reservations are where they differ:

- 22.5 to 24.x have the legacy ``pyslurm.reservation`` class (``get()``, ``create(dict)``,
  ``delete(name)``), which is what the backend uses there;
- 25.5 and later have ``pyslurm.Reservation``/``pyslurm.Reservations`` (pyslurm PR #373).

Releases before 22.5 have no object API, and a release built for another Slurm than the local
one is a mismatch waiting to fail: both are refused, when the backend starts and by
``siteagent check-config``, with what would work instead.
"""

from __future__ import annotations

import enum
import importlib.metadata
import subprocess
from typing import Optional, Tuple

#: (major, minor) as pyslurm and Slurm number their releases: Slurm 22.05 is (22, 5).
Series = Tuple[int, int]

FIRST_SUPPORTED: Series = (22, 5)
FIRST_WITH_RESERVATION_OBJECTS: Series = (25, 5)

SUPPORTED = (
    "the pyslurm backend supports pyslurm 22.5 to 24.x (reservations through the legacy "
    "pyslurm.reservation class) and 25.5 or later (pyslurm.Reservation), in the release built "
    "for the local Slurm (pyslurm X.Y.* for Slurm X.Y)"
)


class ReservationApi(enum.Enum):
    """The reservation API of a supported pyslurm release."""

    LEGACY = "pyslurm.reservation"
    OBJECTS = "pyslurm.Reservation"


def series(version: str) -> Optional[Series]:
    """``22.5.3`` → (22, 5), ``22.05.8`` → (22, 5); None for anything else."""
    parts = version.strip().split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def reservation_api(pyslurm: Series) -> ReservationApi:
    """The reservation API of a supported pyslurm series."""
    if pyslurm >= FIRST_WITH_RESERVATION_OBJECTS:
        return ReservationApi.OBJECTS
    return ReservationApi.LEGACY


def refusal(version: str, slurm: Optional[Series]) -> str:
    """Why pyslurm ``version`` cannot serve a Slurm of series ``slurm`` (None: unknown, so
    not compared), or "" when it can."""
    found = series(version)
    if found is None:
        problem = f"cannot tell the version of pyslurm {version!r}"
    elif found < FIRST_SUPPORTED:
        problem = f"pyslurm {version} is too old (it has no Jobs/Nodes object API)"
    elif slurm is not None and found != slurm:
        problem = f"pyslurm {version} is built for Slurm {_slurm_name(found)}, not this Slurm"
    else:
        return ""
    return f"{problem}; {SUPPORTED}. {install_hint(slurm)}"


def install_hint(slurm: Optional[Series]) -> str:
    """How to install the pyslurm release for ``slurm`` (or for the local Slurm, unknown)."""
    wanted = f"{slurm[0]}.{slurm[1]}" if slurm else "X.Y"
    where = f"Slurm {_slurm_name(slurm)}" if slurm else "Slurm X.Y"
    return (
        f"Install the pyslurm release for {where}: pip install 'pyslurm=={wanted}.*' where "
        f"PyPI has it, else built from its source tag v{wanted}.* of PySlurm/pyslurm "
        "(docs/admin.md, 'The pyslurm backend', shows how for Slurm 22.05); or use "
        "backend.type slurm"
    )


def _slurm_name(slurm: Series) -> str:
    return f"{slurm[0]}.{slurm[1]:02d}"


def local_slurm() -> Optional[Series]:
    """The local Slurm's series from ``scontrol --version`` (``slurm 22.05.8``), None when
    there is no scontrol to ask."""
    try:
        out = subprocess.run(
            ["scontrol", "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return series(out.split()[-1]) if out.split() else None


def installed_refusal() -> str:
    """Why the installed pyslurm cannot serve the local Slurm, or "" when it can; read from
    the package's metadata, so nothing is loaded (for ``siteagent check-config``)."""
    try:
        version = importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return f"pyslurm is not installed; {SUPPORTED}. {install_hint(local_slurm())}"
    return refusal(version, local_slurm())
