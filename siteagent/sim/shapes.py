"""What a job asks of a midplane machine: a box of midplanes, joined as a mesh or a torus.

The rules are the paper's ("Simulation environment", Aridor et al. 2005; docs/design.md §4.9):

* a *slim* shape for a size n: three nested loops, b and c over 1..4 and, innermost, a over
  1..8; the first (b, c, a) with b·c·a = n, else the first with the smallest product above n.
  The paper prints it b × c × a: 6 → 1 × 1 × 6, 16 → 1 × 2 × 8, 27 → 3 × 3 × 3;
* a *fat* shape: the same with every extent at least 2 (no job smaller than 2 × 2 × 2);
* a job is fattened with probability p and toroidal with probability Pt, each drawn from a
  hash of its purpose, the job's number and the seed (so every arm of a comparison sees the
  same choices);
* Fig. 8's "sizes adjusted as for fat jobs": a job's size becomes its fat shape's volume
  whether or not the job is fattened.

A request's extents are in machine order (x, y, z): the extent up to 8 along x, the machine's
long dimension (8 × 4 × 4 midplanes); the allocator tries every rotation.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Dict, List, Optional, Tuple

#: Extents (x, y, z) of a box of midplanes.
Dims = Tuple[int, int, int]


class Request:
    """A box of ``dims`` midplanes joined as a torus or a mesh; ``rotations`` are the distinct
    orders of its extents, ``dims`` first (the order the allocator tries them in)."""

    __slots__ = ("code", "dims", "rotations", "torus", "volume")

    def __init__(self, dims: Dims, torus: bool) -> None:
        a, b, c = dims
        if min(dims) < 1:
            raise ValueError(f"a box needs every extent >= 1, got {dims}")
        self.dims = dims
        self.torus = torus
        self.volume = a * b * c
        rotations: List[Dims] = []
        for rotation in ((a, b, c), (a, c, b), (b, a, c), (b, c, a), (c, a, b), (c, b, a)):
            if rotation not in rotations:
                rotations.append(rotation)
        self.rotations = rotations
        #: one number per distinct request, for the allocator's memo
        self.code = ((a * 64 + b) * 64 + c) * 2 + (1 if torus else 0)

    def __repr__(self) -> str:
        a, b, c = self.dims
        return f"Request({a}x{b}x{c}, {'torus' if self.torus else 'mesh'})"


def slim_shape(size: int) -> Tuple[int, int, int]:
    """The paper's slim shape of ``size`` midplanes, as it prints it (b, c, a)."""
    return _first_box(size, 1)


def fat_shape(size: int) -> Tuple[int, int, int]:
    """The paper's fat shape of ``size`` midplanes (every extent >= 2), printed (b, c, a)."""
    return _first_box(size, 2)


def _first_box(size: int, least: int) -> Tuple[int, int, int]:
    if not 1 <= size <= 128:
        raise ValueError(f"a job of {size} midplanes does not fit 8 x 4 x 4 midplanes")
    larger: Optional[Tuple[int, int, int]] = None
    for b in range(least, 5):
        for c in range(least, 5):
            for a in range(least, 9):
                product = a * b * c
                if product == size:
                    return (b, c, a)
                if product > size and (larger is None or product < _volume(larger)):
                    larger = (b, c, a)
    assert larger is not None
    return larger


def _volume(shape: Tuple[int, int, int]) -> int:
    return shape[0] * shape[1] * shape[2]


def machine_dims(shape: Tuple[int, int, int]) -> Dims:
    """A printed shape (b, c, a) in machine order (x, y, z) = (a, b, c)."""
    b, c, a = shape
    return (a, b, c)


def draw(purpose: str, job: int, seed: int) -> float:
    """A number in [0, 1) fixed by purpose, job and seed, never by Python's salted hash: the
    first 64 bits of SHA-256 of the JSON text [purpose, job, seed] (the reproductions' keyed
    draws, docs/reproductions.md §3, are the same numbers)."""
    text = json.dumps([purpose, job, seed], separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") * 2.0**-64


class Shaper:
    """Turns a job's processors into a request: size = ceil(procs / ``divide``) midplanes
    (the paper divides CTC's by 4), fattened with probability ``fat``, toroidal with
    probability ``torus``, the size first adjusted to the fat shape's volume if
    ``fat_sizes`` (Fig. 8)."""

    def __init__(
        self,
        fat: float = 0.0,
        torus: float = 0.0,
        seed: int = 1,
        fat_sizes: bool = False,
        divide: int = 1,
    ) -> None:
        for name, value in (("fat", fat), ("torus", torus)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"the {name} probability must be in [0, 1], got {value}")
        if divide < 1:
            raise ValueError(f"sizes can only be divided by a whole number >= 1, got {divide}")
        self.fat = fat
        self.torus = torus
        self.seed = seed
        self.fat_sizes = fat_sizes
        self.divide = divide
        self._made: Dict[int, Request] = {}

    def request(self, job: int, procs: int) -> Request:
        size = math.ceil(procs / self.divide)
        if self.fat_sizes:
            size = _volume(fat_shape(size))
        fattened = draw("fat", job, self.seed) < self.fat
        toroidal = draw("torus", job, self.seed) < self.torus
        dims = machine_dims(fat_shape(size) if fattened else slim_shape(size))
        return self._shared(Request(dims, toroidal))

    def _shared(self, request: Request) -> Request:
        """One object per distinct request (the allocator keys its memo on them)."""
        return self._made.setdefault(request.code, request)
