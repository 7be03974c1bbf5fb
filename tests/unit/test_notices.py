"""The batch system's notices: the agent's socket listener, and contrib/slurm/resv-notify (the
program slurmctld runs as ResvProlog and ResvEpilog) talking to it, as root and as another user,
and with the agent gone or hung: the program always exits 0 on its own."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from siteagent.daemon.assemble import notice_handler
from siteagent.host import installation
from siteagent.host.notices import MAX_NOTICE_BYTES, Notice, NoticeListener, parse_notice
from siteagent.market.reservations import UnknownReservation
from siteagent.market.store import ReservationRecord, ReservationState
from testbed.records import a_record

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "contrib" / "slurm" / "resv-notify"


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory every user may enter (pytest's own are root's alone), removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="siteagent-notices-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


class Heard:
    """The notices a listener handed on, and what it answered."""

    def __init__(self) -> None:
        self.notices: List[Notice] = []

    def __call__(self, notice: Notice) -> Dict[str, Any]:
        self.notices.append(notice)
        return {"ok": True, "state": "ACTIVE"}


@pytest.fixture
def heard() -> Heard:
    return Heard()


@pytest.fixture
def listener(place: Path, heard: Heard) -> Iterator[NoticeListener]:
    listening = NoticeListener(place / "run" / "notify.sock", frozenset(), heard)
    listening.start()
    try:
        yield listening
    finally:
        listening.close()


def installed(place: Path, name: str, socket_path: Path) -> Path:
    """resv-notify as install-service writes it, under ``name``, for ``socket_path``."""
    text = installation.set_constant(PROGRAM.read_text(), "SOCKET", str(socket_path))
    program = place / name
    program.write_text(installation.set_constant(text, "PREFIX", "sa-"))
    program.chmod(0o755)
    return program


def run(program: Path, *args: str, user: str = "root") -> subprocess.CompletedProcess[str]:
    """The program as slurmctld runs it: an empty environment, the reservation as argument."""
    return subprocess.run(
        [str(program), *args], env={}, user=user, capture_output=True, text=True, timeout=30
    )


# --------------------------------------------------------------------------- the wire format


def test_a_notice_is_an_event_and_a_reservation_name() -> None:
    line = b'{"event": "end", "reservation": "sa-0123456789ab"}\n'
    assert parse_notice(line, 64030) == Notice("end", "sa-0123456789ab", 64030)


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b'["begin", "sa-1"]\n',
        b'{"event": "begin"}\n',
        b'{"event": "begin", "reservation": "sa-1", "extra": 1}\n',
        b'{"event": "started", "reservation": "sa-1"}\n',
        b'{"event": "begin", "reservation": "sa-1 Flags=MAINT"}\n',
        b'{"event": "begin", "reservation": "sa-1\\n"}\n',
        b'{"event": "begin", "reservation": 7}\n',
        b"\xff\xfe\n",
    ],
)
def test_anything_else_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError):
        parse_notice(line, 0)


# --------------------------------------------------------------------------- the program


@pytest.mark.parametrize(
    ("name", "event"), [("slurm-resv-prolog", "begin"), ("slurm-resv-epilog", "end")]
)
def test_the_program_tells_the_agent(
    place: Path, listener: NoticeListener, heard: Heard, name: str, event: str
) -> None:
    done = run(installed(place, name, listener.path), "sa-0123456789ab")
    assert (done.returncode, done.stderr) == (0, "")
    assert heard.notices == [Notice(event, "sa-0123456789ab", 0)]


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the program as nobody, which needs root")
def test_another_user_is_refused(place: Path, listener: NoticeListener, heard: Heard) -> None:
    done = run(installed(place, "slurm-resv-prolog", listener.path), "sa-1", user="nobody")
    assert done.returncode == 0
    assert "may not notify" in done.stderr
    assert heard.notices == []


def test_reservations_of_others_are_not_reported(
    place: Path, listener: NoticeListener, heard: Heard
) -> None:
    done = run(installed(place, "slurm-resv-prolog", listener.path), "maintenance")
    assert (done.returncode, done.stderr, heard.notices) == (0, "", [])


def test_the_program_exits_0_when_nobody_listens(place: Path) -> None:
    done = run(installed(place, "slurm-resv-epilog", place / "gone.sock"), "sa-1")
    assert done.returncode == 0
    assert "the agent was not told" in done.stderr


def test_the_program_gives_up_on_an_agent_that_never_answers(place: Path) -> None:
    path = place / "hung.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:
        hung.bind(str(path))
        hung.listen(4)  # takes the connection, never reads it
        done = run(installed(place, "slurm-resv-prolog", path), "sa-1")
    assert done.returncode == 0
    assert "timed out" in done.stderr


@pytest.mark.parametrize("args", [(), ("sa-1", "sa-2")])
def test_the_program_exits_0_when_misused(place: Path, args: tuple[str, ...]) -> None:
    done = run(installed(place, "slurm-resv-prolog", place / "x.sock"), *args)
    assert done.returncode == 0
    assert "expected the reservation's name" in done.stderr


def test_a_copy_named_neither_prolog_nor_epilog_says_so(place: Path) -> None:
    done = run(installed(place, "resv-notify", place / "x.sock"), "sa-1")
    assert done.returncode == 0
    assert "must end in 'prolog' or 'epilog'" in done.stderr


# --------------------------------------------------------------------------- the listener


def exchange(path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(path))
        client.sendall(data)
        client.shutdown(socket.SHUT_WR)
        return client.makefile("rb").readline()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"nonsense\n", "one line of JSON"),
        (b'{"event": "begin", "reservation": "sa-1"}', "one line"),  # no newline
        (b"x" * (MAX_NOTICE_BYTES + 10) + b"\n", "one line"),
        (b'{"event": "stop", "reservation": "sa-1"}\n', "event must be"),
    ],
)
def test_malformed_notices_get_an_error_and_reach_nobody(
    listener: NoticeListener, heard: Heard, data: bytes, error: str
) -> None:
    answer = exchange(listener.path, data)
    assert answer.startswith(b'{"ok": false')
    assert error.encode() in answer
    assert heard.notices == []


def test_a_silent_client_costs_nothing_but_its_own_thread(
    listener: NoticeListener, heard: Heard
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(listener.path))
        answer = exchange(listener.path, b'{"event": "begin", "reservation": "sa-1"}\n')
    assert answer == b'{"ok": true, "state": "ACTIVE"}\n'
    assert heard.notices == [Notice("begin", "sa-1", 0)]


def test_a_failing_handler_is_an_error_answer(place: Path) -> None:
    def broken(notice: Notice) -> Dict[str, Any]:
        raise RuntimeError("bug")

    listening = NoticeListener(place / "n.sock", frozenset(), broken)
    listening.start()
    try:
        answer = exchange(listening.path, b'{"event": "end", "reservation": "sa-1"}\n')
        assert b"failed to handle" in answer
        again = exchange(listening.path, b'{"event": "end", "reservation": "sa-1"}\n')
        assert answer == again  # still listening
    finally:
        listening.close()
    assert not listening.path.exists()


def test_the_socket_is_open_to_all_and_replaces_a_stale_one(place: Path, heard: Heard) -> None:
    path = place / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as old:
        old.bind(str(path))  # left by a previous run
    listening = NoticeListener(path, frozenset({os.getuid()}), heard)
    listening.start()
    try:
        assert path.stat().st_mode & 0o777 == 0o666
    finally:
        listening.close()


def test_a_file_in_the_way_is_never_removed(place: Path, heard: Heard) -> None:
    path = place / "notes.txt"
    path.write_text("mine")
    with pytest.raises(OSError, match="not a socket"):
        NoticeListener(path, frozenset(), heard).start()
    assert path.read_text() == "mine"


def test_notices_are_handled_concurrently(listener: NoticeListener, heard: Heard) -> None:
    def send(index: int) -> None:
        exchange(listener.path, f'{{"event": "begin", "reservation": "sa-{index}"}}\n'.encode())

    threads = [threading.Thread(target=send, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(notice.reservation for notice in heard.notices) == [f"sa-{i}" for i in range(8)]


# --------------------------------------------------------------------------- the agent's answer


class Lifecycle:
    """The reservation manager as the handler sees it: names it knows, and the moves asked."""

    def __init__(self) -> None:
        self.asked: List[str] = []

    def started(self, name: str) -> ReservationRecord:
        self.asked.append(f"started {name}")
        if name != "sa-r1":
            raise UnknownReservation(f"no reservation named {name!r} is the agent's")
        return dataclasses.replace(a_record(), state=ReservationState.ACTIVE)

    def ended(self, name: str) -> ReservationRecord:
        self.asked.append(f"ended {name}")
        return dataclasses.replace(a_record(), state=ReservationState.COMPLETED)


class Loop:
    def __init__(self) -> None:
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1


def test_a_notice_moves_the_reservation_and_wakes_the_loop() -> None:
    lifecycle, loop = Lifecycle(), Loop()
    handle = notice_handler(lifecycle, loop)  # type: ignore[arg-type]
    assert handle(Notice("begin", "sa-r1", 0)) == {"ok": True, "state": "ACTIVE"}
    assert handle(Notice("end", "sa-r1", 0)) == {"ok": True, "state": "COMPLETED"}
    assert loop.wakes == 2
    refused = handle(Notice("begin", "sa-nope", 0))
    assert refused == {"ok": False, "error": "no reservation named 'sa-nope' is the agent's"}
    assert loop.wakes == 2
    assert lifecycle.asked == ["started sa-r1", "ended sa-r1", "started sa-nope"]
