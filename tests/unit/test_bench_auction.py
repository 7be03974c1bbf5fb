"""The auction benchmark's helpers that could silently measure the wrong market: the paper's
Table 2 read into agent configurations (a typo would price or place a resource wrongly, and
a section the agent refuses would fail only at start-up), how many agents the memory takes,
and the phases read back from a buyer's journal."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

from bench.auction import (
    AGENT_MB,
    COPY_SHIFT_S,
    RESERVE_MB,
    TABLE2,
    agents_that_fit,
    table2_sites,
)
from bench.auction_buyer import phases
from siteagent.client.journal import AuctionState, Journal
from siteagent.config.loading import parse
from siteagent.config.schema import BackendType, PricingPolicy


def test_table2_gives_twenty_distinct_resources_on_traces_that_exist() -> None:
    sites = table2_sites()
    assert len(sites) == 20
    assert len({site.name for site in sites}) == 20
    for site in sites:
        assert site.backend is not None
        assert Path(site.backend["swf"]["trace"]).is_file(), site.name


def test_each_resource_is_configured_as_the_paper_says() -> None:
    by_name = {site.name: site for site in table2_sites()}
    atlas = parse({"backend": by_name["atlas1"].backend, "pricing": by_name["atlas1"].pricing})
    assert atlas.backend.type is BackendType.SWF
    assert atlas.backend.swf.offset == 3370000
    assert Path(str(atlas.backend.swf.trace)).name == "LLNL-Atlas-2006-2.1-cln.swf.gz"
    assert atlas.pricing.policy is PricingPolicy.LOAD
    assert atlas.pricing.load.start_price == Decimal("33")
    assert atlas.pricing.load.min_price == Decimal("25")
    assert atlas.pricing.externality.enabled is False
    curie4 = parse({"backend": by_name["curie4"].backend, "pricing": by_name["curie4"].pricing})
    assert curie4.backend.swf.offset == 2375000
    assert (curie4.pricing.load.start_price, curie4.pricing.load.min_price) == (70, 65)


def test_intrepid_missing_from_traces_is_replayed_by_curie_at_the_papers_offsets() -> None:
    intrepids = [site for site in table2_sites() if site.name.startswith("intrepid")]
    assert [site.offset for site in intrepids] == [
        row[2] for row in TABLE2 if row[0].startswith("intrepid")
    ]
    for site in intrepids:
        assert site.backend is not None
        assert Path(site.backend["swf"]["trace"]).name == "CEA-Curie-2011-2.1-cln.swf.gz"


def test_table2_sites_takes_the_first_rows_when_fewer_fit() -> None:
    assert [site.name for site in table2_sites(3)] == ["atlas1", "atlas2", "thunder1"]


def test_agents_that_fit_leaves_the_reserve_and_never_exceeds_the_table() -> None:
    assert agents_that_fit(100_000) == 20
    assert agents_that_fit(RESERVE_MB + 5 * AGENT_MB + 1) == 5
    assert agents_that_fit(RESERVE_MB - 1) == 0


def test_phases_reads_each_round_and_the_commit_from_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    before = time.time() - 1
    record = journal.open_auction({"parts": 1})
    journal.bidding_round(record.id, 1, {})
    journal.bidding_round(record.id, 2, {})
    journal.set_auction(record.id, AuctionState.DONE, "confirmed")
    journal.close()
    found = phases(tmp_path / "journal.db", before)
    assert found["state"] == "done"
    assert len(found["rounds_s"]) == 2
    assert all(duration >= 0 for duration in found["rounds_s"])
    assert found["commit_s"] >= 0
    assert phases(tmp_path / "journal.db", time.time() + 60) == {}


def test_a_federation_wider_than_table2_repeats_it_a_week_later_under_new_names() -> None:
    sites = table2_sites(50)
    assert len({site.name for site in sites}) == 50
    first, copy, third = sites[0], sites[20], sites[40]
    assert (copy.name, third.name) == ("atlas1-2", "atlas1-3")
    assert (
        copy.offset - first.offset == COPY_SHIFT_S
        and third.offset - first.offset == 2 * COPY_SHIFT_S
    )
    assert copy.pricing == first.pricing
    assert copy.backend["swf"]["offset"] == copy.offset


def test_agents_that_fit_takes_a_federation_wider_than_the_table() -> None:
    assert agents_that_fit(100_000, wanted=50) == 50
