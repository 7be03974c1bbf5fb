"""What PBS's failures mean: the server did not answer, or it said no."""

from __future__ import annotations

#: Messages meaning "the server did not answer" rather than "it said no" (docs/pbs.md §4,
#: §5.2, §6).
UNAVAILABLE_MARKERS = (
    "cannot connect to server",
    "Connection refused",
    "No route to host",
    "Connection timed out",
    "Communication failure",
)
#: How pbs_rstat and pbs_rdel say a reservation id does not exist (deleted, or denied).
UNKNOWN_RESV = "Unknown Reservation Id"
