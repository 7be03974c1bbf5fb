"""The name rules match whole strings: a trailing newline ("bob\\n") is refused by every rule and
by everything that takes a name to a batch system, a signature or a configuration."""

from __future__ import annotations

import subprocess
from re import Pattern
from typing import Any, Callable, Dict, List, Sequence, Tuple

import pytest

from siteagent.backends.pbs.arguments import parse_rsub_reply, rsub_args
from siteagent.backends.pbs.backend import PbsBackend
from siteagent.backends.pbs.config import PbsConfig
from siteagent.backends.slurm.arguments import reservation_args
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.config import reading
from siteagent.core import names
from siteagent.core.values import ReservationSpec
from siteagent.ledger.bank import LedgerRefused, parse_money
from siteagent.protocol.keys import check_key_id

NOW = 1795330000

#: Each rule with a value it accepts.
VALID: Dict[str, Tuple[Pattern[str], str]] = {
    "NAME": (names.NAME, "batch"),
    "RESERVATION_PREFIX": (names.RESERVATION_PREFIX, "sa-"),
    "USER": (names.USER, "bob"),
    "KEY_ID": (names.KEY_ID, "alice@laptop"),
    "HOST_NAME": (names.HOST_NAME, "login1.example.org"),
    "PBS_RESERVATION_NAME": (names.PBS_RESERVATION_NAME, "sa-q1"),
    "PBS_RESERVATION_ID": (names.PBS_RESERVATION_ID, "R123.pbs-head"),
    "PBS_QUEUE": (names.PBS_QUEUE, "workq"),
    "UNIX_GROUP": (names.UNIX_GROUP, "proj1"),
}


@pytest.mark.parametrize("rule_name", sorted(VALID))
def test_every_rule_refuses_a_trailing_newline(rule_name: str) -> None:
    rule, good = VALID[rule_name]
    assert names.is_valid(rule, good)
    assert names.check(rule, good, "name") == good
    for bad in (good + "\n", "\n" + good, good + "\nx", good + " ", good + "\r\n"):
        assert not names.is_valid(rule, bad), (rule_name, bad)
        with pytest.raises(ValueError, match="invalid name"):
            names.check(rule, bad, "name")
    assert not names.is_valid(rule, None) and not names.is_valid(rule, 7)


def slurm_spec(**kw: Any) -> ReservationSpec:
    base: Dict[str, Any] = {"name": "sa-r1", "start": NOW + 600, "duration": 3600, "size": 8}
    base.update(kw)
    return ReservationSpec(**base)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"name": "sa-r1\n"}, "reservation name"),
        ({"users": ("bob\n",)}, "user name"),
        ({"accounts": ("proj1\n",)}, "account name"),
        ({"partition": "batch\n"}, "partition name"),
    ],
)
def test_slurm_arguments_refuse_a_trailing_newline(kw: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reservation_args(slurm_spec(**kw), SlurmConfig(users=("root",)), NOW)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"name": "sa-q1\n"}, "reservation name"),
        ({"users": ("bob\n",)}, "user name"),
        ({"accounts": ("proj1\n",)}, "group"),
    ],
)
def test_pbs_arguments_refuse_a_trailing_newline(kw: Dict[str, Any], message: str) -> None:
    spec = slurm_spec(**{"name": "sa-q1", **kw})
    with pytest.raises(ValueError, match=message):
        rsub_args(spec, PbsConfig(), NOW)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SlurmConfig(name_prefix="sa-\n"),
        lambda: SlurmConfig(users=("bob\n",)),
        lambda: SlurmConfig(partition="batch\n"),
        lambda: PbsConfig(name_prefix="sa-\n"),
        lambda: PbsConfig(users=("bob\n",)),
        lambda: PbsConfig(queue="workq\n"),
    ],
)
def test_backend_options_refuse_a_trailing_newline(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="invalid"):
        make()


@pytest.mark.parametrize(
    ("convert", "bad"),
    [
        (reading.name, "batch\n"),
        (reading.reservation_prefix, "sa-\n"),
        (reading.listen_address, "localhost\n"),
        (reading.scheduler_user, "bob\n"),
    ],
)
def test_configuration_refuses_a_trailing_newline(convert: Callable[[Any], str], bad: str) -> None:
    assert convert(bad.rstrip("\n")) == bad.rstrip("\n")
    with pytest.raises(reading.Invalid):
        convert(bad)


def test_key_ids_refuse_a_trailing_newline() -> None:
    assert check_key_id("alice@laptop") == "alice@laptop"
    with pytest.raises(ValueError, match="invalid key id"):
        check_key_id("alice@laptop\n")


def test_the_prefix_rule_is_the_stricter_one() -> None:
    """A prefix starts with a letter (PBS names must) and is at most 16 characters long."""
    for prefix in ("sa-", "market-", "xx-", "a" * 16):
        assert names.is_valid(names.RESERVATION_PREFIX, prefix)
    for prefix in ("", "1sa-", "-x", "a" * 17):
        assert not names.is_valid(names.RESERVATION_PREFIX, prefix)


@pytest.mark.parametrize(
    "reply",
    ["R12.pbs-head;id UNCONFIRMED", "R12.pbs/head UNCONFIRMED", "R\u0661\u0662.pbs-head CONFIRMED"],
)
def test_a_pbs_rsub_reply_whose_id_breaks_the_rule_has_no_id(reply: str) -> None:
    """The id goes back to pbs_rstat and pbs_rdel: only one by the rule is taken."""
    with pytest.raises(ValueError, match="no reservation id"):
        parse_rsub_reply(reply + "\n")
    assert parse_rsub_reply("R12.pbs-head UNCONFIRMED\n") == ("R12.pbs-head", "UNCONFIRMED")


def test_a_pbs_reservation_id_that_breaks_the_rule_never_reaches_pbs_rdel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pbs_rstat's ``Resv ID:`` lines are PBS's output, not a name the agent checked."""
    rstat = (
        "Resv ID: R9.pbs-head -x\n"
        "Reserve_Name = sa-r1\n"
        "reserve_state = RESV_CONFIRMED\n"
        "reserve_start = Wed Nov 15 14:00:00 2023\n"
        "reserve_end = Wed Nov 15 15:00:00 2023\n"
    )
    ran: List[Sequence[str]] = []

    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        ran.append(args)
        return subprocess.CompletedProcess(list(args), 0, rstat if args[0] == "pbs_rstat" else "")

    backend = PbsBackend(PbsConfig(name_prefix="sa-"))
    monkeypatch.setattr(backend, "_run", run)
    with pytest.raises(ValueError, match="invalid PBS reservation id"):
        backend.delete_reservation("sa-r1")
    assert [args[0] for args in ran] == ["pbs_rstat"]


@pytest.mark.parametrize("amount", ["43.40\n", "43.40 ", "4340", "43.4"])
def test_the_bank_takes_an_amount_written_exactly(amount: str) -> None:
    with pytest.raises(LedgerRefused, match=r"deal\.price: expected an amount written with two"):
        parse_money(amount, "price")
    assert parse_money("43.40", "price") == 4340
