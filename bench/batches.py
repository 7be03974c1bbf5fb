"""What a batch part costs the agent, against the single call: the figures behind the rates a
batch is counted at (docs/batches.md, siteagent/api/rates.py).

The agent's API in process (testbed/inprocess/api_harness.py: the routes, the gate with its
signature
checks, the store on disk, the embedded bank) on a small replayed cluster; this process's CPU
time (``time.process_time``) for N single quotes, accepts and confirms, and for the same work
as one batch of N, ``--rounds`` times, the order alternating. The client's own signing is
outside the timed calls where it can be (the bodies are signed before the clock starts).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from bench.common import machine, md_table, median, write_results
from siteagent.protocol import documents, signing
from testbed.inprocess.api_harness import BASE, World, make_world
from testbed.inprocess.parties import Party

#: Parts per batch (and single calls per round).
PARTS = 20


def prepared(world: World, party: Party, method: str, path: str, payload: Any) -> Any:
    """A request signed now, sent when called."""
    body = json.dumps(payload).encode()
    headers = signing.sign_request(method, BASE + path, body, party.key, party.key_id)
    headers["Content-Type"] = "application/json"
    return lambda: world.http.request(method, path, content=body, headers=headers)


def cpu(calls: List[Callable[[], Any]], expect: int) -> float:
    began = time.process_time()
    for call in calls:
        answer = call()
        assert answer.status_code == expect, answer.text
    return time.process_time() - began


def offers(world: World, party: Party, count: int) -> List[str]:
    """One offer each of ``count`` windows that do not overlap (so all can be held)."""
    now = world.http.get("/v1/slots").json()["now"]
    requests = [
        {"cores": 1, "walltime": 600, "limit": 1, "earliest_start": now + 4 * 3600 + 700 * k}
        for k in range(count)
    ]
    answer = world.signed(party, "POST", "/v1/quotes/batch", {"requests": requests})
    return [quote["offers"][0]["offer_id"] for quote in answer.json()["answers"]]


def one_round(world: World, party: Party) -> Dict[str, Tuple[float, float]]:
    """(single calls, one batch) CPU seconds for each kind of request, PARTS parts each."""
    out: Dict[str, Tuple[float, float]] = {}
    quote = {"cores": 1, "walltime": 600, "limit": 1}
    singles = [prepared(world, party, "POST", "/v1/quotes", quote) for _ in range(PARTS)]
    batch = [prepared(world, party, "POST", "/v1/quotes/batch", {"requests": [quote] * PARTS})]
    out["quote"] = (cpu(singles, 200), cpu(batch, 200))
    ids = offers(world, party, 2 * PARTS)
    singles = [
        prepared(world, party, "POST", "/v1/reservations", {"offer_id": i}) for i in ids[:PARTS]
    ]
    single_accept = cpu(singles, 201)
    batch = [prepared(world, party, "POST", "/v1/reservations/batch", {"offer_ids": ids[PARTS:]})]
    out["accept"] = (single_accept, cpu(batch, 201))
    held = [world.site.store.reservation_for_offer(i) for i in ids]
    deals = [world.context.deals.deal_document(record) for record in held if record is not None]
    singles = [
        prepared(
            world,
            party,
            "POST",
            f"/v1/reservations/{deal['reservation_id']}/confirm",
            documents.confirm_body(deal, party.key, party.key_id),
        )
        for deal in deals[:PARTS]
    ]
    single_confirm = cpu(singles, 200)
    body = documents.batch_confirm_body(deals[PARTS:], party.key, party.key_id)
    batch = [prepared(world, party, "POST", "/v1/reservations/confirm", body)]
    out["confirm"] = (single_confirm, cpu(batch, 200))
    return out


def run(args: argparse.Namespace) -> Dict[str, Any]:
    results: Dict[str, Any] = {"machine": machine(), "parts": PARTS, "rounds": args.rounds}
    seen: Dict[str, List[Tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        limits = {"per_second": 10_000, "burst": 100_000}
        rates = {"quotes": limits, "reservations": limits}
        world = make_world(Path(scratch), api={"rate_limits": rates})
        try:
            for i in range(args.rounds):
                world.context.agent.cycle()
                party = world.alice if i % 2 == 0 else world.bob
                for kind, pair in one_round(world, party).items():
                    seen.setdefault(kind, []).append(pair)
                print(f"round {i + 1}/{args.rounds} done", flush=True)
        finally:
            world.http.close()
            world.app.state.quotes.close()
            world.ledger.close()
            world.site.close()
    rows = []
    for kind, pairs in seen.items():
        single = median([a for a, _ in pairs]) / PARTS
        part = median([b for _, b in pairs]) / PARTS
        rows.append(
            {
                "request": kind,
                "single call ms": single * 1000,
                "batch part ms": part * 1000,
                "part / single": part / single,
            }
        )
    results["rows"] = rows
    return results


def markdown(results: Dict[str, Any]) -> str:
    where = results["machine"]
    confirm = next(row for row in results["rows"] if row["request"] == "confirm")
    return "\n".join(
        [
            "# What a batch part costs the agent (`python -m bench batches`)",
            "",
            f"Measured {where['date']} on {where['cpus']} CPUs shared with other work, load "
            f"average {where['load_average_1m_at_start']} at start. The agent's API in process "
            "(routes, signature checks, store on disk, embedded bank) on a small replayed "
            f"cluster; CPU time of {results['parts']} single calls and of one batch of as many "
            f"parts, medians over {results['rounds']} rounds, per part.",
            "",
            md_table(results["rows"], list(results["rows"][0])),
            f"A confirm part costs {confirm['part / single']:.2f} of a single confirm: a batch "
            "confirm is counted as one request per 10 parts (siteagent/api/rates.py), a batch "
            "accept as one per part (each is a command to the batch system besides), a batch "
            "quote as one per request (each is priced).",
            "",
        ]
    )


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench batches", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    args = parser.parse_args(argv)
    results = run(args)
    write_results("batches", results, markdown(results))
    return 0
