"""The two-phase commit of an auction's outcome (the marketplace paper, section 5.1.1, steps
5-9): hold every part, then confirm every part, or release them all.

**Voting.** The choices come best first (:meth:`Auction.choices`). For each part of a choice
the best candidate is accepted: the site creates a tentative reservation, or refuses (its
capacity is gone, the offer expired) and the next candidate is tried. A part already held
that is a candidate of the next choice too is kept when a choice cannot be completed; the
others are cancelled. A site that does not answer is dropped from the commit; what it may
hold is left to its deadline and to ``recover``.

**Commit.** When every part is held, the auction is journaled ``confirming`` and each part is
confirmed with the buyer's signature over its deal (the connection checks the receipt's
signature against the site's published key). If a confirm is refused, every part is
released, confirmed ones too (at their penalty): a co-allocation is all or nothing.

Every request is journaled before it is sent (:mod:`.journal`). The user's interrupt is a
flag the commit checks before each request, so that the request in flight gets its answer
and the journal stays exact; then every tentative reservation is cancelled, and confirmed
parts are kept and reported (cancelling them costs their penalty: the user decides).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from siteagent.client.connection import SiteError, SiteUnreachable, Tentative
from siteagent.client.journal import AuctionState, HoldState, Journal, JournalEntry
from siteagent.client.plans import PlanningError
from siteagent.client.recovery import Seller, definite, refusal, release_all
from siteagent.client.reverse_auction import Bid, Choice

#: How many of the best placements of a co-allocation are tried before giving up: each costs
#: accepts (and, when they are refused, the sites' rate limits); beyond the best few, a new
#: auction sees the sites as they are now.
CHOICES_TRIED = 10


class Interrupted(Exception):
    """The user asked to stop (the commit releases what it holds)."""


@dataclass(frozen=True)
class CommitOutcome:
    """How the commit ended: ``state`` (done, failed, interrupted), why, and every entry it
    made, as journaled last. ``confirmed`` are the parts bought (all of them when done);
    ``unsettled`` what a site that stopped answering may still hold."""

    state: AuctionState
    message: str
    entries: Tuple[JournalEntry, ...]

    @property
    def confirmed(self) -> List[JournalEntry]:
        return [entry for entry in self.entries if entry.state is HoldState.CONFIRMED]

    @property
    def unsettled(self) -> List[JournalEntry]:
        return [entry for entry in self.entries if not entry.settled]


@dataclass
class Held:
    """A part held at a site: its journal entry and what the site answered."""

    entry: JournalEntry
    tentative: Tentative


class Commit:
    """The commit of one auction (see the module's docstring). ``interrupted`` is checked
    before each request; ``clock`` is the wall clock offers expire by."""

    def __init__(
        self,
        journal: Journal,
        auction_id: str,
        sellers: Mapping[str, Seller],
        parts: int,
        budget: Optional[Decimal] = None,
        interrupted: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.auction_id = auction_id
        self.sellers = sellers
        self.parts = parts
        self.budget = budget
        self.interrupted = interrupted
        self.clock = clock
        self.held: Dict[int, Held] = {}
        self.tried: Set[str] = set()
        self.silent: Dict[str, str] = {}

    def run(self, choices: Sequence[Choice]) -> CommitOutcome:
        """Hold the parts of the first choice that can be held, then confirm them."""

        def hold_and_confirm() -> CommitOutcome:
            for choice in choices[:CHOICES_TRIED]:
                if self._hold(choice):
                    return self._confirm()
            self._release(cancel_confirmed=False)
            return self._end(AuctionState.FAILED, self._why_not_held(choices))

        return self._guarded(hold_and_confirm)

    def run_plan(
        self, hold: Callable[[], Mapping[int, Held]], confirm: bool = True
    ) -> CommitOutcome:
        """Hold the parts through ``hold`` (a provisioning planner holding each task's window
        as it plans it), then confirm them all; a PlanningError from ``hold`` (a task no site
        would hold), a refused confirm, or ``confirm=False`` (a dry run) releases them all."""

        def plan_and_confirm() -> CommitOutcome:
            try:
                self.held = dict(hold())
            except PlanningError as exc:
                self._release(cancel_confirmed=False)
                return self._end(AuctionState.FAILED, f"{exc}: {self._released('task')}")
            if confirm:
                return self._confirm()
            self._release(cancel_confirmed=False)
            return self._end(AuctionState.FAILED, "dry run: nothing confirmed")

        return self._guarded(plan_and_confirm)

    def _guarded(self, phases: Callable[[], CommitOutcome]) -> CommitOutcome:
        """Run the commit's ``phases``; an interrupt or a failure releases what is held."""
        try:
            return phases()
        except Interrupted:
            self._release(cancel_confirmed=False)
            kept = [e for e in self._entries() if e.state is HoldState.CONFIRMED]
            said = f"interrupted: {self._released('tentative reservation', 'part')}"
            if kept:
                said += f"; {len(kept)} confirmed part(s) kept (cancel them at their penalty)"
            return self._end(AuctionState.INTERRUPTED, said)
        except Exception:
            self._release(cancel_confirmed=False)
            raise

    # ---- voting: hold every part of a choice

    def _hold(self, choice: Choice) -> bool:
        """Hold every part of ``choice``, keeping parts already held among its candidates;
        False if a part cannot be held."""
        for part, held in list(self.held.items()):
            offers = {bid.offer_id for bid in choice.candidates[part]}
            if held.entry.offer_id not in offers:
                self._cancel(part)
        for part, candidates in enumerate(choice.candidates):
            if part not in self.held and not self._hold_part(part, candidates, choice):
                return False
        return True

    def _hold_part(self, part: int, candidates: Sequence[Bid], choice: Choice) -> bool:
        """Accept the part's candidates best first until a site agrees. A site that refused
        is not asked again for this part of this choice: its other offers there were priced
        on the same plan (often in earlier rounds), and what took the capacity of one takes
        theirs."""
        refused: Set[str] = set()
        for bid in candidates:
            if bid.site in refused or not self._worth_trying(bid, choice):
                continue
            held = self.accept(bid)
            if held is not None:
                self.held[part] = held
                return True
            if bid.site not in self.silent:
                refused.add(bid.site)
        return False

    def accept(self, bid: Bid) -> Optional[Held]:
        """Accept ``bid``, journaled before it is sent: the part held, or None if the site
        refused it or did not answer (it is then ``silent``, and asked nothing more)."""
        self._check_interrupt()
        self.tried.add(bid.offer_id)
        entry = self.journal.accepting(self.auction_id, bid)
        try:
            tentative = self.sellers[bid.site].accept(bid.offer_id, entry.idempotency_key)
        except (SiteError, SiteUnreachable) as exc:
            if isinstance(exc, SiteError) and definite(exc):
                self.journal.refused(entry, refusal(exc))
            else:
                self.journal.noted(entry, str(exc))
                self.silent[bid.site] = str(exc)
            return None
        entry = self.journal.tentative(
            entry, tentative.reservation_id, tentative.deal, tentative.deadline
        )
        return Held(entry, tentative)

    def _worth_trying(self, bid: Bid, choice: Choice) -> bool:
        """Not tried yet, from a site that answers, not expired, and within the budget with
        the parts held and the other parts at their cheapest in this choice."""
        if bid.offer_id in self.tried or bid.site in self.silent:
            return False
        if bid.expires <= self.clock():
            return False
        if self.budget is None:
            return True
        spent = sum((held.entry.bid.total for held in self.held.values()), Decimal(0))
        rest = sum(
            (
                min(b.total for b in candidates)
                for other, candidates in enumerate(choice.candidates)
                if other != bid.part and other not in self.held
            ),
            Decimal(0),
        )
        return spent + bid.total + rest <= self.budget

    # ---- commit: confirm every part

    def _confirm(self) -> CommitOutcome:
        for part in sorted(self.held):
            failed = self._confirm_part(part)
            if failed is not None:
                return failed
        return self._confirmed()

    def _confirm_part(self, part: int) -> Optional[CommitOutcome]:
        """Confirm one part; the auction's failure (every part released) if it is refused."""
        self._check_interrupt()
        held = self.held[part]
        entry = self.journal.confirming(held.entry)
        seller = self.sellers[entry.site]
        try:
            receipt = seller.confirm(held.tentative)
        except (SiteError, SiteUnreachable) as exc:
            return self._confirm_failed([part], [entry], entry.site, exc)
        held.entry = self.journal.confirmed(entry, receipt.to_json())
        return None

    def _confirm_failed(
        self, parts: Sequence[int], entries: Sequence[JournalEntry], site: str, exc: Exception
    ) -> CommitOutcome:
        """A confirm of ``parts`` at ``site`` refused or unanswered: journaled, every part
        released (confirmed ones too: a co-allocation is all or nothing)."""
        for part, entry in zip(parts, entries):
            if isinstance(exc, SiteError) and definite(exc):
                detail = refusal(exc)
                self.held[part].entry = self.journal.back_to_tentative(entry, detail)
            else:
                detail = str(exc)
                self.held[part].entry = self.journal.noted(entry, detail)
        self._release(cancel_confirmed=True)
        named = ", ".join(str(part + 1) for part in parts)
        why = f"the confirm of part {named} at {site} failed ({detail}): "
        return self._end(AuctionState.FAILED, why + self._released("part"))

    def _confirmed(self) -> CommitOutcome:
        bought = len(self.held)
        self._release(cancel_confirmed=False)  # what sites that fell silent may hold
        return self._end(AuctionState.DONE, f"{bought} part(s) confirmed")

    # ---- releasing

    def _cancel(self, part: int) -> None:
        held = self.held.pop(part)
        release_all([held.entry], self.sellers, self.journal, cancel_confirmed=False)

    def _release(self, cancel_confirmed: bool) -> None:
        """Settle every entry of this auction: tentative ones (and confirmed ones, if asked)
        cancelled, unanswered accepts asked again; sites that stopped answering are asked
        once more, since their entries may be all that is left."""
        self.held.clear()
        unsettled = [
            entry
            for entry in self._entries()
            if not entry.settled or (cancel_confirmed and entry.state is HoldState.CONFIRMED)
        ]
        release_all(unsettled, self.sellers, self.journal, cancel_confirmed)

    def _released(self, what: str, part: str = "") -> str:
        """That every ``what`` held was released, or, when a site did not answer, which
        part(s) it may still hold (journaled unsettled: ``recover`` settles them)."""
        left = [entry for entry in self._entries() if not entry.settled]
        if not left:
            return f"every {what} released"
        named = ", ".join(f"{part or what} {e.part + 1} at {e.site}" for e in left)
        return (
            f"every {what} released but {named}, whose site did not answer "
            "(`siteagent-client recover` settles it once the site answers)"
        )

    def _entries(self) -> List[JournalEntry]:
        return self.journal.entries(self.auction_id)

    def _end(self, state: AuctionState, message: str) -> CommitOutcome:
        self.journal.set_auction(self.auction_id, state, message)
        return CommitOutcome(state, message, tuple(self._entries()))

    def _why_not_held(self, choices: Sequence[Choice]) -> str:
        if not choices:
            return "no offer meets the constraints"
        refused = [e for e in self._entries() if e.state is HoldState.REFUSED]
        reasons = sorted({f"{e.site}: {e.message}" for e in refused})
        reasons += [f"{site}: {reason}" for site, reason in sorted(self.silent.items())]
        said = "; ".join(reasons) or "every offer expired"
        return f"no choice could be held on every part ({said})"

    def _check_interrupt(self) -> None:
        if self.interrupted():
            raise Interrupted()
