"""How the agent reaches one PBS server and what it may do there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

from siteagent.core import names
from siteagent.core.defaults import DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_RESERVATION_PREFIX
from siteagent.core.values import CapacityUnit


@dataclass(frozen=True)
class PbsConfig:
    """How the agent reaches one PBS server and what it may do there.

    ``pbs_conf`` sets ``PBS_CONF_FILE`` for every command (else ``/etc/pbs.conf``); ``env``
    adds variables (e.g. ``PATH``). ``queue`` limits the snapshot to one execution queue: its
    jobs, jobs in reservation queues, and the vnodes associated with that queue or with none.
    ``unit`` NODE makes reservations of whole vnodes (``place=scatter:excl``) of
    ``cores_per_node`` CPUs (0: the largest usable vnode's ncpus, read from pbsnodes).
    ``users`` are authorised on reservations whose spec names none. ``timeout`` bounds every
    command; ``confirm_timeout`` how long PBS's scheduler may take to confirm a reservation.
    The prefix must itself be a PBS reservation name, the names being made from it.
    """

    pbs_conf: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)
    queue: str = ""
    unit: CapacityUnit = CapacityUnit.CORE
    cores_per_node: int = 0
    users: Tuple[str, ...] = ()
    timeout: float = DEFAULT_COMMAND_TIMEOUT_S
    name_prefix: str = DEFAULT_RESERVATION_PREFIX
    confirm_timeout: float = 60.0

    def __post_init__(self) -> None:
        for user in self.users:
            names.check(names.USER, user, "user name")
        if self.queue:
            names.check(names.PBS_QUEUE, self.queue, "queue name")
        if self.name_prefix:
            names.check(names.PBS_RESERVATION_NAME, self.name_prefix, "reservation name prefix")
        if not self.timeout > 0:
            raise ValueError(f"command timeout must be positive, got {self.timeout}")
        if not self.confirm_timeout > 0:
            raise ValueError(f"confirm timeout must be positive, got {self.confirm_timeout}")
        if self.cores_per_node < 0:
            raise ValueError(f"cores per node must be >= 0, got {self.cores_per_node}")

    def client_env(self) -> Mapping[str, str]:
        """The variables the configuration sets for PBS's clients."""
        env = dict(self.env)
        if self.pbs_conf:
            env["PBS_CONF_FILE"] = self.pbs_conf
        return env
