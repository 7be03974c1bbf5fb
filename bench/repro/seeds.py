"""Paired seeds: every random choice of a reproduction is keyed by (purpose, key, seed).

A draw depends only on what it is for (``purpose``, e.g. "reservation"), on what it is about
(``key``, e.g. a job number) and on the seed, never on how many draws came before. So every arm
of a comparison (α, policy, load, estimate type) sees the same choices for the same job, in
any process and in any order. The hash is SHA-256 of a canonical JSON text, not Python's
``hash()``, which is salted per process. See docs/reproductions.md.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any, List, Tuple, Union

#: What a key may be made of: JSON scalars and tuples/lists of them (their text is stable).
Key = Union[str, int, float, bool, None, Tuple[Any, ...], List[Any]]

_SCALE = 2.0**-64


def seed_int(purpose: str, key: Key, seed: int) -> int:
    """A 64-bit integer fixed by (purpose, key, seed): for ``random.Random`` or a library seed."""
    text = json.dumps([purpose, key, seed], separators=(",", ":"), allow_nan=False)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def rng(purpose: str, key: Key, seed: int) -> random.Random:
    """A private random stream for one (purpose, key, seed): draw as many numbers as needed."""
    return random.Random(seed_int(purpose, key, seed))


def uniform(purpose: str, key: Key, seed: int) -> float:
    """One uniform draw in [0, 1) for (purpose, key, seed), e.g. ``uniform(...) < share``."""
    return seed_int(purpose, key, seed) * _SCALE
