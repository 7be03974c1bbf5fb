"""`python -m bench thesis`: Singh's ch. 3 and ch. 5, now ``python -m bench repro-singh``'s
slots and fees parts (paired seeds, calibrated loads, verdicts; bench/repro/singh). Kept as
a name for the two parts; it takes repro-singh's options and writes its reports
(bench/results/repro-singh-slots.md and bench/results/repro-singh-fees.md)."""

from __future__ import annotations

from typing import List

from bench.repro import singh


def main(argv: List[str]) -> int:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__)
        return singh.main(["--help"])
    return max(singh.main(["slots", *argv]), singh.main(["fees", *argv]))
