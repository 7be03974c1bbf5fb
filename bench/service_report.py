"""The service benchmark's report (bench/results/service.md): its figures in tables, against
its targets and the reference version, with what explains them."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from bench.common import md_table, median

TARGET_P99_MS = 100.0
TARGET_RSS_MB = 150.0
TARGET_CPU_PERCENT = 2.0
#: How close to its idle RSS the agent must come back after a level under attack.
TARGET_RSS_RETURN_MB = 20.0


def markdown(results: Mapping[str, Any]) -> str:
    return "\n".join(
        [
            *header(results),
            *latency_section(results),
            *reference_section(results),
            *attack_section(results),
            *idle_section(results),
        ]
    )


def header(results: Mapping[str, Any]) -> List[str]:
    where, queue, reference = results["machine"], results["queue"], results["reference"]
    return [
        "# The running agent on a 10,000-job queue: quote latency, under attack, RSS and CPU",
        "",
        f"Measured {where['date']} on {where['cpus']} CPUs shared with other work (and with "
        f"the bench's own client processes), Python {where['python']}, load average "
        f"{where['load_average_1m_at_start']} at start; installed package compiled: "
        f"{results['compiled']} (the reference {reference['revision']}: "
        f"{reference['compiled']})."
        + (" Quick run (--quick): fewer requests, 2-minute watch." if results["quick"] else ""),
        "",
        f"Queue: {queue['source']} with submit times x {queue['interarrival_factor']:.4g} on "
        f"{queue['cores']:,} cores ({queue['path']}), replayed by the agent's SWF backend at "
        f"speed 1 from offset {queue['offset_s']:,} s, where the package's simulator has "
        f"{queue['pending_at_offset']:,} jobs waiting and {queue['running_at_offset']:,} "
        "running. Clients: one process each, one keep-alive HTTPS connection (the agent's "
        "self-signed certificate verified), signed POST /v1/quotes (every request signed "
        "afresh, and verified in full by the agent), cores 1..256, walltime 10 min..12 h; "
        "each client connects and sends one unmeasured quote, then all start together. "
        "p50/p99/max are over the quotes answered 200 (offered or refused), from before "
        "signing to the parsed answer. The agents' per-client limits (rates, live offers, "
        "nonces) are set far above the load, the bench's buyers being one client: `429` "
        "counts the quotes answered 429 all the same.",
        "",
    ]


def latency_section(results: Mapping[str, Any]) -> List[str]:
    rounds = results["rounds"]
    lines = [
        "## Quote latency",
        "",
        f"Each level ran {rounds} time(s) on this tree's agent, in turn with the reference's "
        "(next section): p50, p99, req/s and CPU are the medians over the rounds, max the "
        "largest, the counts their sums.",
        "",
    ]
    rows: List[Mapping[str, Any]] = []
    for name, label, level in levels_of(results["latency"]):
        rows.append(
            {
                "pricing": name,
                "offers asked": label,
                "clients": level["clients"],
                "requests": level["requests"],
                "p50 ms": level["p50_ms"],
                "p99 ms": level["p99_ms"],
                "max ms": level["max_ms"],
                "req/s": level["throughput_per_s"],
                "polls": level["polls"],
                "offered": level["offered"],
                "refused": level["refused"],
                "busy": level["busy"],
                "429": level["throttled"],
                "errors": level["errors"],
                "agent CPU ms/req": level["agent_cpu_ms_per_request"],
            }
        )
    lines.append(md_table(rows, list(rows[0])))
    lines += target_lines(results["latency"])
    return [*lines, "", *latency_notes(results["latency"]), ""]


def levels_of(latency: Mapping[str, Any]) -> List[Any]:
    """(pricing, variant, level) of every level, in the order they ran."""
    return [
        (name, label, level)
        for name, entry in latency.items()
        for label, levels in entry["variants"].items()
        for level in levels
    ]


def target_lines(latency: Mapping[str, Any]) -> List[str]:
    lines = []
    for name, entry in latency.items():
        for label, levels in entry["variants"].items():
            at50 = [level for level in levels if level["clients"] == 50]
            if not at50:
                lines.append(f"- {name}, {label}: not run at 50 clients in this run.")
                continue
            p99 = at50[0]["p99_ms"]
            verdict = "meets" if p99 < TARGET_P99_MS else "does NOT meet"
            under = [str(lv["clients"]) for lv in levels if lv["p99_ms"] < TARGET_P99_MS]
            lines.append(
                f"- {name}, {label}: p99 {p99:,.0f} ms at 50 clients, {verdict} the target "
                f"(< {TARGET_P99_MS:.0f} ms); p99 under it at "
                f"{', '.join(under) + ' client(s)' if under else 'no level'}."
            )
    return lines


def reference_section(results: Mapping[str, Any]) -> List[str]:
    reference = results["reference"]
    mine, theirs = levels_of(results["latency"]), levels_of(reference["latency"])
    rows: List[Mapping[str, Any]] = []
    for (name, label, level), (_, _, old) in zip(mine, theirs):
        rows.append(
            {
                "pricing": name,
                "offers asked": label,
                "clients": level["clients"],
                "p50 ms": level["p50_ms"],
                "ref p50 ms": old["p50_ms"],
                "p50 ratio": level["p50_ms"] / old["p50_ms"],
                "p99 ms": level["p99_ms"],
                "ref p99 ms": old["p99_ms"],
                "p99 ratio": level["p99_ms"] / old["p99_ms"],
                "req/s": level["throughput_per_s"],
                "ref req/s": old["throughput_per_s"],
                "req/s ratio": level["throughput_per_s"] / old["throughput_per_s"],
                "ref errors": old["errors"],
            }
        )
    return [
        f"## Against the reference ({reference['revision']})",
        "",
        f"The same levels on an agent of {reference['revision']} ({reference['commit'][:12]}, "
        "installed and compiled the same way, given the same settings in the keys it knows), "
        "side by side with this tree's: the two agents ran at the same time, and each level "
        "ran on one then the other, the order alternating from round to round. Ratios are "
        "this tree's figure over the reference's (p50, p99: below 1 is faster; req/s: above 1 "
        "is faster). The reference has no rate limits or live-offer cap; its one limit, the "
        "shared nonce cache, is raised as this tree's are.",
        "",
        md_table(rows, list(rows[0])),
    ]


def attack_section(results: Mapping[str, Any]) -> List[str]:
    attack = results["attack"]
    rows: List[Mapping[str, Any]] = []
    for level in attack["levels"]:
        for traffic in ("alone", "attacked"):
            seen = level[traffic]
            rows.append(
                {
                    "clients": level["clients"],
                    "traffic": "under attack" if traffic == "attacked" else "buyers alone",
                    "quotes": seen["requests"],
                    "p50 ms": seen["p50_ms"],
                    "p99 ms": seen["p99_ms"],
                    "max ms": seen["max_ms"],
                    "req/s": seen["throughput_per_s"],
                    "429": seen["throttled"],
                    "errors": seen["errors"],
                    "attacks/s": attack_rate(seen["rounds"]),
                    "agent CPU ms/quote": seen["agent_cpu_ms_per_request"],
                    "RSS MB idle / peak / after, each round": rss_text(seen["rounds"]),
                }
            )
    lines = [
        "## Under attack",
        "",
        "An agent with the default pricing; buyers asking one offer per quote for "
        f"{attack['levels'][0]['alone']['rounds'][0]['wall_s']:.0f} s, alone and while six "
        "attacker processes (bench/attackers.py) send it, one kind each, on a new TLS "
        f"connection per request, {attack['per_attacker_per_s']:g} requests/s each at most: "
        "1 MB of header fields, a 4 MB body announced by Content-Length (unsigned), a 4 MB "
        "body sent chunked and signed by the buyers' own key, unsigned malformed JSON, a "
        "quote with a forged signature, a request line that is not HTTP/1.1. The two levels "
        "ran in turn, "
        f"{results['rounds']} time(s), the order alternating; figures as above. RSS: the "
        "median of the second before the level, the peak during it, and 5 s after it. "
        "Agent CPU ms/quote counts the attacks' CPU too.",
        "",
        md_table(rows, list(rows[0])),
        *attack_targets(attack),
        *attack_notes(attack),
        "",
        "What the attackers were answered, over all the attacked levels (0: no answer read, "
        "the connection closed first):",
        "",
        attacks_table(attack),
        "What each attack costs, sent alone and flat out (one attacker, a new connection per "
        "request, for a few seconds, after the levels above):",
        "",
        costs_table(attack["refusal_costs"]),
    ]
    return lines


def costs_table(costs: Sequence[Mapping[str, Any]]) -> str:
    rows: List[Mapping[str, Any]] = [
        {
            "attack": cost["attack"],
            "answered": answered(cost["statuses"]),
            "requests/s": cost["per_second"],
            "agent CPU ms/request": cost["agent_cpu_ms_per_request"],
            "attacker CPU ms/request": cost["attacker_cpu_ms_per_request"],
        }
        for cost in costs
    ]
    return md_table(rows, list(rows[0]))


def answered(statuses: Mapping[str, int]) -> str:
    return ", ".join(f"{status}: {count:,}" for status, count in sorted(statuses.items()))


def rss_text(rounds: Sequence[Mapping[str, Any]]) -> str:
    """Each round's RSS before, at the peak of, and after the level."""
    figures = (round_["rss"] for round_ in rounds)
    return "; ".join(
        f"{r['idle_mb']:.0f} / {r['peak_mb']:.0f} / {r['after_mb']:.0f}" for r in figures
    )


def attack_rate(rounds: Sequence[Mapping[str, Any]]) -> float:
    """The attackers' requests per second in all, the median over the rounds (0: none)."""
    return median([sum(a["per_second"] for a in r["attacks"]) for r in rounds])


def attack_targets(attack: Mapping[str, Any]) -> List[str]:
    lines = []
    for level in attack["levels"]:
        attacked, alone = level["attacked"], level["alone"]
        p99_ok = attacked["p99_ms"] < TARGET_P99_MS
        worst = max(r["rss"]["after_mb"] - r["rss"]["idle_mb"] for r in attacked["rounds"])
        rss_ok = worst <= TARGET_RSS_RETURN_MB
        lines.append(
            f"- {level['clients']} buyers under attack: p99 {attacked['p99_ms']:,.0f} ms "
            f"({'meets' if p99_ok else 'does NOT meet'} < {TARGET_P99_MS:.0f} ms; "
            f"{alone['p99_ms']:,.0f} ms alone); RSS 5 s after the attack at most "
            f"{worst:+.0f} MB from idle ({'meets' if rss_ok else 'does NOT meet'} within "
            f"{TARGET_RSS_RETURN_MB:.0f} MB); {attacked['throttled']} quotes answered 429."
        )
    return lines


def attack_notes(attack: Mapping[str, Any]) -> List[str]:
    """What the attacks cost the CPUs the buyers share, and the agent's memory in the end."""
    costs = {cost["attack"]: cost for cost in attack["refusal_costs"]}
    rates: Dict[str, List[float]] = {}
    for level in attack["levels"]:
        for round_ in level["attacked"]["rounds"]:
            for report in round_["attacks"]:
                rates.setdefault(report["attack"], []).append(report["per_second"])
    rate = {name: median(values) for name, values in rates.items()}
    # requests/s x CPU ms per request = CPU ms per s; / 10: percent of one CPU
    agent = sum(rate[name] * costs[name]["agent_cpu_ms_per_request"] for name in rate) / 10
    attackers = sum(rate[name] * costs[name]["attacker_cpu_ms_per_request"] for name in rate) / 10
    rss = attack["rss"]
    flat = rss["flat_out"]
    busy = [
        f"{level['clients']} buyers, {agent_cpu_percent(level['alone']):.0f}% alone and "
        f"{agent_cpu_percent(level['attacked']):.0f}% under attack"
        for level in attack["levels"]
    ]
    return [
        f"- At the attacked levels' rate ({sum(rate.values()):.0f} requests/s in all), the "
        "costs measured flat out (below) put the agent's refusing at about "
        f"{agent:.0f}% of one CPU and the attackers' own sending at {attackers:.0f}%, "
        "on the 2 CPUs the buyers and the agent share.",
        f"- The agent's own CPU (quotes answered per second x its CPU per quote, the "
        f"refusals included), in % of one CPU: {'; '.join(busy)}. Where it is lower under "
        "attack, the refusals did not keep the agent busy: the buyers' quotes waited for "
        "something else (a CPU shared with the attackers, the buyers and other work, or "
        "their offers' commits).",
        f"- The agent's RSS: {rss['first_idle_mb']:.0f} MB after its warm-up, before any "
        f"attack; after the levels above and the flat-out attacks below, "
        f"{flat['idle_mb']:.0f} MB before the latter, {flat['peak_mb']:.0f} MB at their peak, "
        f"{flat['after_mb']:.0f} MB 5 s after them and {rss['settled_mb']:.0f} MB "
        f"{rss['settle_s']:.0f} s later.",
    ]


def agent_cpu_percent(level: Mapping[str, Any]) -> float:
    """The agent's CPU over a level, in % of one CPU: the median over its rounds."""
    return median(
        [r["throughput_per_s"] * r["agent_cpu_ms_per_request"] / 10 for r in level["rounds"]]
    )


def attacks_table(attack: Mapping[str, Any]) -> str:
    totals: Dict[str, Dict[str, Any]] = {}
    reports = (
        report
        for level in attack["levels"]
        for round_ in level["attacked"]["rounds"]
        for report in round_["attacks"]
    )
    for report in reports:
        total = totals.setdefault(
            report["attack"],
            {
                "attack": report["attack"],
                "expected": report["expected"],
                "requests": 0,
                "statuses": {},
            },
        )
        total["requests"] += report["requests"]
        for status, count in report["statuses"].items():
            total["statuses"][status] = total["statuses"].get(status, 0) + count
    rows: List[Mapping[str, Any]] = [
        {
            "attack": total["attack"],
            "expected": total["expected"],
            "requests": total["requests"],
            "answered": answered(total["statuses"]),
        }
        for total in totals.values()
    ]
    return md_table(rows, list(rows[0]))


def idle_section(results: Mapping[str, Any]) -> List[str]:
    lines = ["## RSS and CPU while polling", ""]
    rows: List[Mapping[str, Any]] = []
    for name, entry in results["idle"].items():
        rows.append(
            {
                "metrics": name,
                "minutes": entry["wall_s"] / 60,
                "max RSS MB": entry["rss_max_mb"],
                "CPU %": entry["cpu_percent"],
                "cycles": entry["cycles"],
                "CPU s per cycle": entry["cpu_s_per_cycle"],
                "snapshot ms": entry["snapshot_ms_median"],
                "plan ms": entry["plan_ms_median"],
                "pending": "{:,}..{:,}".format(*entry["pending_range"]),
                "start-up s": entry["ready_s"],
            }
        )
    lines.append(md_table(rows, list(rows[0])))
    for name, entry in results["idle"].items():
        rss_ok = entry["rss_max_mb"] < TARGET_RSS_MB
        cpu_ok = entry["cpu_percent"] < TARGET_CPU_PERCENT
        lines.append(
            f"- {name}: max RSS {entry['rss_max_mb']:.0f} MB "
            f"({'meets' if rss_ok else 'does NOT meet'} < {TARGET_RSS_MB:.0f} MB), CPU "
            f"{entry['cpu_percent']:.2f}% ({'meets' if cpu_ok else 'does NOT meet'} "
            f"< {TARGET_CPU_PERCENT:.0f}%)."
        )
    lines += [
        "",
        "CPU % is the process's CPU seconds over the wall seconds watched (after start-up, "
        "which replays the trace up to the offset: its time is the start-up column). Both "
        "agents ran at the same time, half a poll apart; snapshot and plan times are the "
        "medians of the agent's own per-cycle log lines. The difference between the two rows "
        "is the metrics' reference requests, quoted with the default pricing at the first "
        "cycle and then every 5 minutes (metrics.reference_interval_s).",
        "",
    ]
    return lines


def latency_notes(latency: Mapping[str, Any]) -> List[str]:
    """Why the figures are what they are, with this run's numbers."""
    notes = [
        "How a quote is served: on the agent's event loop (TLS, RFC 9421 signature check, "
        "validation, pricing), its offers stored by one writer thread in group commits (a "
        "quote is answered once its offers are on disk), so a cheap quote never changes "
        "threads. A quote whose externality fee may re-plan the queue (more than one offer "
        "asked) is priced on the one pricing thread instead, and is answered 503 `busy` at "
        "once, with the estimated wait as Retry-After, when the quotes ahead of it would "
        "hold it more than 5 s. Every 50-client level of a fast variant runs for a whole "
        "poll interval as well, so that one of the agent's polls (snapshot, plan, pricing "
        "context) lands inside it: the `polls` column counts them.",
        "",
    ]
    notes += error_notes(latency)
    for name, entry in latency.items():
        for label, levels in entry["variants"].items():
            for level in (lv for lv in levels if lv["clients"] == 50):
                notes.append(
                    f"- {name}, {label}, 50 clients: {level['throughput_per_s']:.0f} quotes/s, "
                    f"the agent spending {level['agent_cpu_ms_per_request']:.2f} ms of CPU "
                    f"per quote and each client process "
                    f"{level['client_cpu_ms_per_request']:.2f} ms (both on the same 2 CPUs)"
                    + (
                        f"; {level['busy']} of {level['requests']} answered 503 busy (p50 "
                        f"{level['busy_p50_ms']:,.0f} ms, max {level['busy_max_ms']:,.0f} ms; "
                        "p50/p99 are of the priced ones)."
                        if level["busy"]
                        else "."
                    )
                )
    fee20 = latency.get("default (externality fee)", {}).get("variants", {}).get("limit 20")
    if fee20:
        alone = fee20[0]
        notes.append(
            f"- The externality fee with 20 offers asked costs {alone['p50_ms']:,.0f} ms per "
            "quote even alone (each start inside the schedule re-plans the 10,000-job queue): "
            "the agent prices a few such quotes per second, whatever the concurrency, and "
            "answers the excess 503 busy rather than queueing it."
        )
    return notes


def error_notes(latency: Mapping[str, Any]) -> List[str]:
    """The errors seen, and what a stale snapshot under load means."""
    notes = []
    for name, entry in latency.items():
        stale = False
        for label, levels in entry["variants"].items():
            for level in (level for level in levels if level["errors"]):
                first = level["first_errors"][0]
                stale = stale or "snapshot_stale" in first
                notes.append(
                    f"- Errors, {name}, {label}, {level['clients']} clients: "
                    f"{level['errors']} of {level['requests']}; the first: `{first[:160]}`."
                )
        if stale:
            slowest = max(entry["cycles"], key=lambda c: c["snapshot_ms"] + c["plan_ms"])
            notes.append(
                f"- The stale snapshot is the agent's own doing: with {name} the quotes' "
                "re-plans hold the interpreter so long that the poll thread is starved (only "
                f"{len(entry['cycles'])} cycles logged during the whole run, the slowest "
                f"snapshot {slowest['snapshot_ms'] / 1000:.1f} s + plan "
                f"{slowest['plan_ms'] / 1000:.1f} s instead of about 0.05 + 0.3 s), the "
                "snapshot ages past the staleness limit, and the API refuses quotes with 503 "
                "as if the batch system were not answering."
            )
    return notes + ([""] if notes else [])
