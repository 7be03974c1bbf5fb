"""Default values that several layers share (configuration, backends, market, command line),
each defined once, with the reason for its value."""

from __future__ import annotations

from decimal import Decimal

#: What the names of the agent's reservations start with, so that reconciliation tells them
#: from everybody else's. Three characters, because a PBS name holds at most 15 and the agent
#: adds a 12-character id.
DEFAULT_RESERVATION_PREFIX = "sa-"

#: Seconds a buyer has to confirm a tentative reservation (the marketplace paper's step 10
#: timer): time enough for a client program, or a person, to confirm, while capacity nobody
#: confirms goes back to the queue within minutes.
DEFAULT_CONFIRM_TIMEOUT_S = 120.0

#: Cancelling a confirmed reservation costs p x f, f being its fee (the harm it did to queued
#: jobs). 0.1 is the one value the thesis evaluates (Singh, ch. 6.4: "a penalty factor of 0.1
#: (i.e. 10%)"), so the reproductions of its results run on the defaults. It is low on purpose:
#: cancelling gives the capacity back and conservative backfilling moves the delayed jobs up
#: again, so most of the harm f measured is undone; the penalty charges for the part that is
#: not (the disturbed plan, a hole too late to fill) and deters reserve-and-cancel games.
#: Free slots (f = 0) cancel free. Sites wanting a stronger deterrent raise it.
DEFAULT_PENALTY_FACTOR = Decimal("0.1")

#: Seconds between two polls of the batch system. The batch system's own plan changes at about
#: this pace (Slurm's backfill scheduler runs every 30 s by default); quotes in between use the
#: last snapshot, and every accept re-checks against a fresh one.
DEFAULT_POLL_INTERVAL_S = 30.0

#: Seconds a batch-system command may take before the batch system counts as not answering. A
#: Slurm client needs about 9 s to give up on a dead controller (docs/slurm.md §2), so this is
#: well above that, and a hung command still fails within one poll interval.
DEFAULT_COMMAND_TIMEOUT_S = 30.0

#: The replayed trace runs in real time unless told otherwise, like a real cluster.
DEFAULT_REPLAY_SPEED = 1.0

#: How far into the trace a new replayed cluster starts (seconds): two days in, the queue has
#: built up, so quotes and slots look like those of a busy site from the first poll.
DEFAULT_REPLAY_OFFSET_S = 2 * 86400

#: Seconds a quoted offer can be accepted: long enough for a multi-round auction across sites
#: to decide, short enough that an offer does not outlive the snapshot it was priced on by much
#: (the accept re-checks the capacity anyway).
DEFAULT_OFFER_VALID_S = 300

#: The largest request head and body the API reads (bytes). A quote or a confirm with its
#: signature is under 2 KiB; anything far larger is an attack or a bug, refused unread.
DEFAULT_MAX_HEADER_BYTES = 16 * 1024
DEFAULT_MAX_BODY_BYTES = 16 * 1024

#: Seconds a client has to send a whole request once it began (or once its connection was
#: made): a buyer's request is sent at once; a head sent a line every few seconds is not one.
DEFAULT_REQUEST_TIMEOUT_S = 10.0
#: Connections one address may hold open at once (each holds one of the service's file
#: descriptors): a buyer uses one per site, an agent's bank client up to 40.
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 128

#: Requests per second each client may make, and the burst it may save up: quotes (an auction
#: round or a workflow's planning asks a site a few dozen at a time) and the state-changing
#: reservation requests (accept, confirm, cancel: each runs batch-system commands).
DEFAULT_QUOTES_PER_S = 20.0
DEFAULT_QUOTES_BURST = 100
DEFAULT_RESERVATIONS_PER_S = 2.0
DEFAULT_RESERVATIONS_BURST = 20

#: Bids per second each client may ask for (announcing an English auction's job, valuing the
#: bid again in a later round, releasing it): an auctioneer asks each site about every job once
#: a round, and a bid costs the site a plan of its queue around the capacity held.
DEFAULT_BIDS_PER_S = 20.0
DEFAULT_BIDS_BURST = 100

#: How fast a job's input reaches this site from another (bytes per second), for a bid's
#: transfer time: a shared 1 Gbit/s link's worth.
DEFAULT_TRANSFER_RATE = 100_000_000

#: The longest English auction a site takes part in (seconds): its bid holds capacity until
#: the auction ends, so an auctioneer may not hold it for long. The paper's best auctions last
#: 0.3-0.4 of a job's mean run time; six hours covers jobs of a day and more.
DEFAULT_MAX_AUCTION_S = 6 * 3600

#: Auctions one client may take the site into at once: each may hold capacity.
DEFAULT_MAX_OPEN_BIDS_PER_CLIENT = 200

#: What one client's open bids may hold together, in hours of the whole machine: a bid holds
#: its job's cores for its walltime, for free, until its auction ends; a day of the machine
#: (all of it for a day, a quarter of it for four) is far more than an auction's job needs.
DEFAULT_MAX_HELD_MACHINE_HOURS = 24.0

#: Seconds after an English auction closes that its winner has to accept the winning bid's
#: offer; the bid's capacity is held until then. A minute, as a quote's buyer has to accept.
DEFAULT_AUCTION_ACCEPT_WINDOW_S = 60

#: Offers a client may hold at once (quoted, not expired, not accepted): each is a row of the
#: state database until a day after it lapses, so quoting alone must not grow it without end.
DEFAULT_MAX_LIVE_OFFERS_PER_CLIENT = 2000

#: Signature nonces remembered per client within the replay window: at the default quote rate
#: a client signs at most 20/s x (300 + 30) s = 6,600 requests a window.
DEFAULT_NONCES_PER_CLIENT = 20_000
