"""The two-phase commit (:mod:`.commit`) with batches where a site takes them (docs/batches.md).

- **Voting**: the best candidate of every part still to hold is accepted first, the parts at
  one site in one batch accept (all or nothing there); parts a batch could not hold, and parts
  at sites without batches, then go through the commit's own part-by-part search.
- **Commit**: the parts held at one site are confirmed with one signature and one request
  (one booking at the bank); a site without batches is sent one confirm per part.

Journaling is the commit's: each part's entry is written (``accepting``, ``confirming``) before
its request goes, a batch's parts with the idempotency keys the site gives them
(``KEY#i``), so that recovery's single retry of an unanswered part learns what the batch did.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence

from siteagent.client.batches import accept_all, confirm_all, max_parts
from siteagent.client.commit import Commit, CommitOutcome, Held
from siteagent.client.connection import SiteConnection, SiteError, SiteUnreachable
from siteagent.client.journal import JournalEntry
from siteagent.client.recovery import definite, patiently, refusal
from siteagent.client.reverse_auction import Bid, Choice


class BatchCommit(Commit):
    """A :class:`Commit` that sends batches to the sites (``connections``) that take them;
    the other arguments are the commit's."""

    def __init__(
        self, *args: Any, connections: Mapping[str, SiteConnection], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.connections = connections

    def batches_at(self, site: str) -> int:
        """Parts one batch to ``site`` may hold (0: single calls)."""
        connection = self.connections.get(site)
        if connection is None or site in self.silent:
            return 0
        try:
            return max_parts(connection)
        except (SiteError, SiteUnreachable):
            return 0

    def accept_batch(self, site: str, bids: Sequence[Bid]) -> Optional[List[Held]]:
        """Hold ``bids`` (at ``site``, which takes batches) in one batch accept, each part
        journaled first: every part held, or None (the site refused one, and held none, or
        did not answer: it is then ``silent``)."""
        self._check_interrupt()
        key = f"batch-{self.auction_id}-{uuid.uuid4().hex[:16]}"
        entries = [
            self.journal.accepting(self.auction_id, bid, f"{key}#{i}") for i, bid in enumerate(bids)
        ]
        self.tried.update(bid.offer_id for bid in bids)
        connection = self.connections[site]
        try:
            held = patiently(lambda: accept_all(connection, [bid.offer_id for bid in bids], key))
        except (SiteError, SiteUnreachable) as exc:
            refused = isinstance(exc, SiteError) and definite(exc)
            said = refusal(exc) if isinstance(exc, SiteError) else str(exc)
            for entry in entries:
                if refused:
                    self.journal.refused(entry, f"in a batch: {said}")
                else:
                    self.journal.noted(entry, said)
            if refused:  # a batch the site refused whole held nothing: each may go alone
                self.tried.difference_update(bid.offer_id for bid in bids)
            else:
                self.silent[site] = str(exc)
            return None
        return [
            Held(self.journal.tentative(e, t.reservation_id, t.deal, t.deadline), t)
            for e, t in zip(entries, held)
        ]

    # ---- voting

    def _hold(self, choice: Choice) -> bool:
        for part, held in list(self.held.items()):
            offers = {bid.offer_id for bid in choice.candidates[part]}
            if held.entry.offer_id not in offers:
                self._cancel(part)
        firsts: Dict[str, List[Bid]] = {}
        for part, candidates in enumerate(choice.candidates):
            if part in self.held:
                continue
            best = next((b for b in candidates if self._worth_trying(b, choice)), None)
            if best is not None and self.batches_at(best.site):
                firsts.setdefault(best.site, []).append(best)
        for site, bids in firsts.items():
            most = self.batches_at(site)
            if not most:
                continue
            for start in range(0, len(bids), most):
                chunk = bids[start : start + most]
                if len(chunk) > 1:
                    for bid, held in zip(chunk, self.accept_batch(site, chunk) or ()):
                        self.held[bid.part] = held
        return super()._hold(choice)

    # ---- commit

    def _confirm(self) -> CommitOutcome:
        by_site: Dict[str, List[int]] = {}
        for part in sorted(self.held):
            by_site.setdefault(self.held[part].entry.site, []).append(part)
        for site, parts in by_site.items():
            if len(parts) == 1 or not self.batches_at(site):
                for part in parts:
                    failed = self._confirm_part(part)
                    if failed is not None:
                        return failed
                continue
            failed = self._confirm_batch(site, parts)
            if failed is not None:
                return failed
        return self._confirmed()

    def _confirm_batch(self, site: str, parts: Sequence[int]) -> Optional[CommitOutcome]:
        """Confirm ``parts`` (held at ``site``) in one batch; the auction's failure (every part
        released) if it is refused."""
        self._check_interrupt()
        entries: List[JournalEntry] = [self.journal.confirming(self.held[p].entry) for p in parts]
        tentatives = [self.held[p].tentative for p in parts]
        connection = self.connections[site]
        try:
            receipts = patiently(lambda: confirm_all(connection, tentatives))
        except (SiteError, SiteUnreachable) as exc:
            return self._confirm_failed(parts, entries, site, exc)
        for part, entry, receipt in zip(parts, entries, receipts):
            self.held[part].entry = self.journal.confirmed(entry, receipt.to_json())
        return None
