"""What Slurm's failures mean: the controller did not answer, it said no, or it answered
something the agent cannot read."""

from __future__ import annotations

from siteagent.backends.base import BackendUnavailable

#: Messages meaning "the controller did not answer" rather than "it said no" (docs/slurm.md
#: §2, §6).
UNAVAILABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Unexpected message received",  # scontrol create with slurmctld down
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Connection refused",
    "Communication connection failure",
    "Slurm backup controller in standby mode",
    "Transport endpoint is not connected",
)


def is_unavailable(message: str) -> bool:
    return any(marker in message for marker in UNAVAILABLE_MARKERS)


#: Slurm refuses with "Invalid user id" both a reservation for a user it does not know and any
#: reservation command from a user without AdminLevel=Operator (seen on 22.05 with slurmdbd).
INVALID_USER_HINT = (
    " (Slurm says this for a user it does not know, and also when the agent's own user lacks "
    "AdminLevel=Operator: sacctmgr -i modify user <agent user> set adminlevel=operator)"
)


#: Slurm 26.05 answers a reservation for a user it does not know with no reason at all (its
#: log says "Reservation request has invalid user"): docs/slurm.md §11.
UNSPECIFIED_HINT = (
    " (Slurm 26.05 says this for a reservation naming a user it does not know; slurmctld's "
    "log says which)"
)


def with_hint(message: str) -> str:
    """Slurm's message, with a hint where its words are ambiguous."""
    if "Invalid user id" in message:
        return message + INVALID_USER_HINT
    if "Error creating the reservation: Unspecified error" in message:
        return message + UNSPECIFIED_HINT
    return message


#: What a parser raises on a document in a known layout but not of the shape Slurm writes
#: (a field of another type, a record that is not an object).
MALFORMED = (AttributeError, KeyError, TypeError, ValueError)


def malformed(command: str, error: Exception) -> BackendUnavailable:
    """An answer the agent cannot read is no answer: the poll fails and is retried."""
    return BackendUnavailable(
        f"{command}: output is not what Slurm writes ({type(error).__name__}: {error})"
    )
