"""`python -m bench NAME [options]`: run one benchmark; results go to bench/results/NAME.*"""

from __future__ import annotations

import importlib
import sys

from bench.repro.registry import available

BENCHMARKS = {
    "simulate": "bench.simulate",
    "slots": "bench.slots",
    "fees": "bench.fees",
    "batches": "bench.batches",
    "quotes": "bench.quotes",
    "thesis": "bench.thesis",
    "slurm": "bench.slurm",
    "service": "bench.service",
    "english": "bench.english",
    "provision": "bench.provision",
    "auction": "bench.auction",
    "ledger": "bench.ledger",
    # the paper reproductions (bench/repro/registry.py lists them; docs/reproductions.md)
    **{name: command.module for name, command in available().items()},
    "repro-all": "bench.repro.run_all",
}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
        names = ", ".join(BENCHMARKS)
        print(f"usage: python -m bench NAME [options]   (NAME: {names}; NAME --help for options)")
        return 2
    module = importlib.import_module(BENCHMARKS[sys.argv[1]])
    code: int = module.main(sys.argv[2:])
    return code


if __name__ == "__main__":
    sys.exit(main())
