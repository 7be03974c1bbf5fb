"""The OpenPBS stand-in (testbed/standins/pbs) against the real OpenPBS, side by side.

The stand-in stays for what the real one cannot show here (testbed/standins/pbs/README.md),
so it must print what OpenPBS prints: the same commands run on both, and their outputs must
have the same shape — the attributes the stand-in gives, in OpenPBS's order and with its JSON
types (the stand-in may leave attributes out, never add or reorder them), ``pbs_rstat -f``
with the very same attribute lines, the same replies, messages and exit statuses.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from testbed.pbs.cluster import PbsTestCluster, text_blocks
from testbed.standins.pbs.harness import StandinServer

pytestmark = pytest.mark.pbs


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinServer]:
    server = StandinServer(tmp_path_factory.mktemp("pbs-standin"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def real(cluster: PbsTestCluster, *args: str) -> Tuple[int, str, str]:
    proc = cluster.run(list(args), check=False)
    return proc.returncode, proc.stdout, proc.stderr


def fake(server: StandinServer, *args: str) -> Tuple[int, str, str]:
    proc = server.run(list(args), env={"TZ": "UTC"})
    return proc.returncode, proc.stdout, proc.stderr


def shape(record: Dict[str, Any]) -> List[Tuple[str, str]]:
    """(key, JSON type) of every attribute, nested objects flattened as ``key.sub``."""
    found = []
    for key, value in record.items():
        if isinstance(value, dict):
            found += [(f"{key}.{k}", t) for k, t in shape(value)]
        else:
            found.append((key, type(value).__name__))
    return found


def out_of_order(part: List[Any], whole: List[Any]) -> List[Any]:
    """The items of ``part`` that are not in ``whole`` in the same order (none: ``part`` is
    a subsequence of ``whole``), each with OpenPBS's item at that place."""
    found, at = [], 0
    for item in part:
        if item in whole[at:]:
            at = whole.index(item, at) + 1
        else:
            found.append((item, whole[at] if at < len(whole) else None))
    return found


def stamp(epoch: float) -> str:
    return time.strftime("%Y%m%d%H%M", time.gmtime(epoch))


def test_qstat_and_pbsnodes_json_have_openpbs_shape(
    openpbs: PbsTestCluster, standin: StandinServer
) -> None:
    running = openpbs.submit("-l", "select=1:ncpus=16", "-l", "walltime=01:00:00")
    openpbs.submit("-l", "select=4:ncpus=16", "-l", "walltime=01:00:00")
    deadline = time.monotonic() + 30
    while True:
        jobs = json.loads(real(openpbs, "qstat", "-f", "-F", "json")[1])["Jobs"]
        top = [j for j in jobs.values() if "estimated" in j]
        # resources_used comes with the mom's first report on the running job
        if ("resources_used" in jobs[running] and top) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    doc = json.loads(real(openpbs, "qstat", "-f", "-F", "json")[1])
    fake_doc = json.loads(fake(standin, "qstat", "-f", "-F", "json", "-t")[1])
    assert list(fake_doc) == list(doc) == ["timestamp", "pbs_version", "pbs_server", "Jobs"]
    by_state = {j["job_state"] + str("estimated" in j): j for j in doc["Jobs"].values()}
    fake_by_state = {j["job_state"] + str("estimated" in j): j for j in fake_doc["Jobs"].values()}
    for kind in ("RFalse", "QTrue"):
        assert out_of_order(shape(fake_by_state[kind]), shape(by_state[kind])) == [], kind
    assert fake_by_state["QTrue"]["topjob"] == by_state["QTrue"]["topjob"] == "True"

    nodes = json.loads(real(openpbs, "pbsnodes", "-av", "-F", "json")[1])["nodes"]
    fake_nodes = json.loads(fake(standin, "pbsnodes", "-av", "-F", "json")[1])["nodes"]
    busy = next(n for n in nodes.values() if "jobs" in n)
    fake_busy = next(n for n in fake_nodes.values() if "jobs" in n)
    assert out_of_order(shape(fake_busy), [*shape(busy), ("last_used_time", "int")]) == []
    idle = next(n for n in nodes.values() if "jobs" not in n)
    assert idle["resources_assigned"] == {}  # zeros left out (docs/pbs.md §4)


def test_reservations_print_as_in_openpbs(openpbs: PbsTestCluster, standin: StandinServer) -> None:
    start = stamp(time.time() + 3 * 86400)
    args = (
        "pbs_rsub",
        "-R",
        start,
        "-D",
        "600",
        "-N",
        "sa-shape",
        "-l",
        "select=2:ncpus=1",
        "-l",
        "place=free",
        "-U",
        "root",
    )
    replies = [real(openpbs, *args), fake(standin, *args)]
    for rc, out, err in replies:
        assert rc == 0 and err == "" and re.fullmatch(r"R\d+\.\S+ UNCONFIRMED\n", out), out
    time.sleep(2)  # both confirm within a scheduling cycle
    blocks = [
        text_blocks(real(openpbs, "pbs_rstat", "-f")[1]),
        text_blocks(fake(standin, "pbs_rstat", "-f")[1]),
    ]
    (theirs,), (ours,) = (list(b.values()) for b in blocks)
    assert list(ours) == list(theirs)
    assert ours["reserve_state"] == theirs["reserve_state"] == "RESV_CONFIRMED"
    assert ours["Authorized_Users"].split("@")[0] == theirs["Authorized_Users"].split("@")[0]


ERRORS = [
    ("qstat", "-f", "-F", "json", "99"),
    ("pbs_rstat", "-f", "R99"),
    ("pbs_rstat", "-f", "foo"),
    ("pbs_rdel", "R99"),
    ("pbs_rsub", "-R", "202001010000", "-E", "202001010100", "-l", "select=1:ncpus=1"),
]


@pytest.mark.parametrize("args", ERRORS, ids=lambda a: " ".join(a))
def test_refusals_read_as_in_openpbs(
    openpbs: PbsTestCluster, standin: StandinServer, args: Tuple[str, ...]
) -> None:
    rc, _out, err = real(openpbs, *args)
    fake_rc, _fake_out, fake_err = fake(standin, *args)
    assert fake_rc == rc
    assert fake_err.replace("pbs-head", "pbshead") == err


def test_the_tests_run_on_what_they_name(openpbs: PbsTestCluster, tmp_path: Path) -> None:
    """The wrappers run OpenPBS's own commands, not the stand-in's."""
    version = real(openpbs, "qstat", "--version")[1]
    assert version.strip() == "pbs_version = 23.06.06"
    assert "standins" not in (openpbs.bin / "qstat").read_text()
