"""Quotes across sites: every site asked at once, each failure a row of its own (never an
exception), and the offers ranked by the α trade-off between total price and end."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, List

import pytest

from siteagent.client.connection import BadAnswer, SiteConnection, SiteError, SiteUnreachable
from siteagent.client.fanout import Answered, ask_all
from siteagent.client.quotes import SiteOffer, rank
from siteagent.client.sites import Site, Timeouts
from siteagent.core.files import UnsafeFile
from siteagent.protocol.models import OfferView


def connections(tmp_path: Path, count: int) -> List[SiteConnection]:
    return [
        SiteConnection(
            Site(f"s{i}", "https://127.0.0.1:1", tmp_path, None, "a", tmp_path / "k", Timeouts())
        )
        for i in range(count)
    ]


def test_every_site_is_asked_at_once(tmp_path: Path) -> None:
    """Each call waits for all the others to have started: asked one after the other, the
    first would wait for ever (and the barrier break after its timeout)."""
    everyone = threading.Barrier(4, timeout=30)

    def call(connection: SiteConnection) -> str:
        everyone.wait()
        return connection.site.name

    results = ask_all(connections(tmp_path, 4), call)
    assert [(result.site, result.value) for result in results] == [
        (f"s{i}", f"s{i}") for i in range(4)
    ]
    assert all(result.outcome is Answered.OK and result.latency_s >= 0 for result in results)


@pytest.mark.parametrize(
    ("error", "outcome", "reason"),
    [
        (
            SiteError("who are you?", code="unknown_key", site="s0", status=401),
            Answered.REFUSED,
            "who are you? (unknown_key)",
        ),
        (
            SiteError("too much", code="busy", site="s0", status=503),
            Answered.FAILED,
            "too much (busy)",
        ),
        (
            BadAnswer("not JSON", code="invalid_answer", site="s0", status=404),
            Answered.FAILED,
            "not JSON (invalid_answer)",
        ),
        (
            SiteUnreachable("no answer within 1 s", site="s0", timed_out=True),
            Answered.TIMED_OUT,
            "no answer within 1 s",
        ),
        (SiteUnreachable("refused", site="s0"), Answered.FAILED, "refused"),
        (UnsafeFile("mode 0644", path="k"), Answered.FAILED, "k: mode 0644"),
    ],
)
def test_a_sites_failure_is_its_row_with_the_reason(
    tmp_path: Path, error: Exception, outcome: Answered, reason: str
) -> None:
    def call(connection: SiteConnection) -> str:
        if connection.site.name == "s0":
            raise error
        return "fine"

    failed, fine = ask_all(connections(tmp_path, 2), call)
    assert (failed.outcome, failed.value, failed.error, failed.reason) == (
        outcome,
        None,
        error,
        reason,
    )
    assert (fine.outcome, fine.value, fine.reason) == (Answered.OK, "fine", "")


def test_a_bug_of_ours_is_not_hidden_as_a_sites_failure(tmp_path: Path) -> None:
    def call(connection: SiteConnection) -> Any:
        return {}["missing"]

    with pytest.raises(KeyError):
        ask_all(connections(tmp_path, 2), call)


def an_offer(site: str, total: str, end: int, offer_id: str = "o") -> SiteOffer:
    view = OfferView(
        offer_id=offer_id,
        start=end - 3600,
        end=end,
        cores=8,
        unit_price="1",
        fee="0",
        total=total,
        expires=100,
    )
    return SiteOffer(site, view)


CHEAP_LATE = an_offer("a", "10.00", 9000)
DEAR_EARLY = an_offer("b", "50.00", 4000)
MIDDLE = an_offer("c", "20.00", 5000)


def test_alpha_one_ranks_the_cheapest_first_and_zero_the_earliest() -> None:
    offers = [DEAR_EARLY, CHEAP_LATE, MIDDLE]
    assert rank(offers, 1.0) == [CHEAP_LATE, MIDDLE, DEAR_EARLY]
    assert rank(offers, 0.0) == [DEAR_EARLY, MIDDLE, CHEAP_LATE]


def test_alpha_weighs_normalised_price_against_normalised_end() -> None:
    # normalised (cost, end): cheap-late (0, 1), dear-early (1, 0), middle (0.25, 0.2)
    assert rank([CHEAP_LATE, DEAR_EARLY, MIDDLE], 0.5)[0] == MIDDLE
    assert rank([CHEAP_LATE, DEAR_EARLY], 0.6) == [CHEAP_LATE, DEAR_EARLY]
    assert rank([CHEAP_LATE, DEAR_EARLY], 0.4) == [DEAR_EARLY, CHEAP_LATE]


def test_ties_go_to_the_cheaper_then_the_earlier_then_the_order_given() -> None:
    same_score_cheaper = an_offer("x", "10.00", 5000)
    same_score_dearer = an_offer("y", "20.00", 4000)
    # α = 0.5: both score 0.5; the cheaper goes first
    assert rank([same_score_dearer, same_score_cheaper], 0.5) == [
        same_score_cheaper,
        same_score_dearer,
    ]
    first, second = an_offer("a", "10.00", 5000, "o1"), an_offer("b", "10.00", 5000, "o2")
    assert rank([first, second], 0.3) == [first, second]
    assert rank([second, first], 0.3) == [second, first]
    assert rank([], 0.5) == []
