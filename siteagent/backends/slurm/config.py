"""How the agent reaches one Slurm cluster and what it may do there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Sequence, Tuple

from siteagent.core import names
from siteagent.core.defaults import DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_RESERVATION_PREFIX
from siteagent.core.values import CapacityUnit


@dataclass(frozen=True)
class SlurmConfig:
    """How the agent reaches one Slurm cluster and what it may do there.

    ``slurm_conf`` sets ``SLURM_CONF`` for every command (else the client default applies);
    ``env`` adds variables (e.g. ``PATH``). ``partition`` limits the snapshot and the
    reservations to one partition (the agent serves one homogeneous partition). ``users`` are
    put on reservations whose spec names none. ``flags`` go on every reservation created (only
    :data:`~siteagent.core.names.SLURM_RESERVATION_FLAGS`). ``timeout`` bounds every command: a
    Slurm client needs ~9 s to give up on a dead controller (docs/slurm.md §2), so keep it well
    above that. ``qos_levels`` gives the absolute priority of each QoS where Slurm preempts by
    QoS (docs/english-auction.md §5): (name, level) pairs, level 1 the lowest.
    ``command_prefix`` runs every command through another program, e.g.
    ``["ssh", "ctl"]`` or ``["chroot", "/srv/slurm"]``, when Slurm's clients are not the host's
    own (docs/slurm.md §11); the variables then travel as ``env K=V`` words.
    """

    slurm_conf: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)
    partition: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    users: Tuple[str, ...] = ()
    flags: Tuple[str, ...] = ()
    timeout: float = DEFAULT_COMMAND_TIMEOUT_S
    name_prefix: str = DEFAULT_RESERVATION_PREFIX
    qos_levels: Tuple[Tuple[str, int], ...] = ()
    command_prefix: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for word in self.command_prefix:
            check_command_word(word)
        allowed = names.SLURM_RESERVATION_FLAGS
        bad = [f for f in self.flags if f not in allowed]
        if bad:
            raise ValueError(
                f"reservation flags not allowed: {', '.join(bad)} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        for user in self.users:
            names.check(names.USER, user, "user name")
        if self.partition:
            names.check(names.NAME, self.partition, "partition name")
        if self.name_prefix:
            names.check(names.RESERVATION_PREFIX, self.name_prefix, "reservation name prefix")
        for qos, level in self.qos_levels:
            names.check(names.NAME, qos, "QoS name")
            if level < 1:
                raise ValueError(f"QoS {qos}: a level is 1 or more, got {level}")
        if not self.timeout > 0:
            raise ValueError(f"command timeout must be positive, got {self.timeout}")

    def client_env(self) -> Mapping[str, str]:
        """The variables the configuration sets for Slurm's clients."""
        env = dict(self.env)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def command(self, args: Sequence[str], env: Mapping[str, str]) -> List[str]:
        """The argument list that runs ``args`` with ``env``: ``args`` itself without a
        prefix, else the prefix, ``env``, the variables and ``args``, since a prefix such as
        ssh does not pass the caller's environment on."""
        if not self.command_prefix:
            return list(args)
        words = [f"{key}={value}" for key, value in sorted(env.items())]
        return [*self.command_prefix, "env", *words, *args]


def check_command_word(word: object) -> str:
    """One word of ``command_prefix``: non-empty text without NUL or line breaks (it is an
    argument, never parsed by a shell here); ValueError otherwise."""
    if not isinstance(word, str) or not word or any(c in word for c in "\0\n\r"):
        raise ValueError(
            f"command prefix word: expected non-empty text without NUL or line breaks, got {word!r}"
        )
    return word
