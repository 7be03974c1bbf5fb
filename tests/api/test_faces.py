"""The API and the command line are two faces of one market: the same quote for the same
request on the same snapshot, and the same confirm (a receipt and a ledger booking).

The quote tests freeze the cluster at one snapshot, on a partition that allocates cores and on
one that allocates whole nodes (where a request for cores is a request for the nodes that hold
them), and ask both faces the same requests. The confirm test runs the real composition of
``siteagent serve`` in-process and ``siteagent reservations confirm`` on the same state
directory.
"""

from __future__ import annotations

import json
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.agent.loop import Agent
from siteagent.api.app import create_app
from siteagent.api.context import ApiContext
from siteagent.backends import registry
from siteagent.backends.base import Backend
from siteagent.cli.main import main
from siteagent.config import loading
from siteagent.core.values import (
    BatchReservation,
    CapacityUnit,
    ClusterSnapshot,
    Job,
    NodeState,
    ReservationSpec,
)
from siteagent.daemon.assemble import assemble
from siteagent.market.deals import Deals
from siteagent.market.site import open_site
from siteagent.protocol.documents import Receipt, confirm_body, signature_valid
from siteagent.protocol.keys import load_private_key, parse_public_key
from siteagent.protocol.signing import sign_request
from siteagent.security.clients import AuthorizedClient
from testbed.inprocess.fakes import Trusting
from testbed.inprocess.traces import write_trace

with warnings.catch_warnings():  # Starlette now prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NOW = 1_700_000_000
H = 3600


class FrozenCluster(Backend):
    """A batch system that stays at one snapshot (its clock included), so that two faces
    asked one after the other price the very same cluster."""

    name = "frozen"

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def now(self) -> int:
        return self._snapshot.now

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        raise AssertionError("quoting reserves nothing")

    def delete_reservation(self, name: str) -> None:
        raise AssertionError("quoting deletes nothing")

    def list_reservations(self) -> List[BatchReservation]:
        return []


def nodes(busy: int) -> Tuple[NodeState, ...]:
    """Four 16-core nodes, the first ``busy`` of them allocated."""
    return tuple(
        NodeState(f"n{i}", 16, alloc_cores=16 if i <= busy else 0, partitions=("batch",))
        for i in range(1, 5)
    )


#: 64 cores in 4 nodes: 48 cores (3 nodes) busy for two hours, and a job of as many queued.
CORE_PARTITION = ClusterSnapshot(
    now=NOW,
    capacity=64,
    running=(Job("1", 48, NOW - H, 3 * H, start=NOW - H, nodes=3),),
    pending=(Job("2", 48, NOW - 60, H, nodes=3),),
    nodes=nodes(3),
    backend="frozen",
)
NODE_PARTITION = ClusterSnapshot(
    now=NOW,
    capacity=4,
    running=(Job("1", 48, NOW - H, 3 * H, start=NOW - H, nodes=3),),
    pending=(Job("2", 48, NOW - 60, H, nodes=3),),
    nodes=nodes(3),
    unit=CapacityUnit.NODE,
    cores_per_node=16,
    backend="frozen",
)

#: (command-line options, the same request as the API's body), side by side on one line.
REQUESTS = [
    (["--cores", "32", "--duration", "2h"], {"cores": 32, "walltime": 2 * H}),
    (["--cores", "16", "--duration", "1h", "--alpha", "1"], {"cores": 16, "walltime": H, "alpha": 1}),  # noqa: E501
    (["--cores", "20", "--duration", "30m", "--limit", "3"], {"cores": 20, "walltime": 1800, "limit": 3}),  # noqa: E501
    (["--cores", "64", "--duration", "1h", "--max-price", "0.5"], {"cores": 64, "walltime": H, "max_price": "0.5"}),  # noqa: E501
    (["--cores", "80", "--duration", "1h"], {"cores": 80, "walltime": H}),
]  # fmt: skip


@pytest.fixture(params=[CORE_PARTITION, NODE_PARTITION], ids=["cores", "nodes"])
def frozen(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Tuple[List[str], TestClient]]:
    """The command line's site options and an API client, both on the frozen cluster."""
    cluster = FrozenCluster(request.param)
    # the registry, not siteagent.market.site.open_backend: a module importing that name while
    # it is patched (the CLI's, imported lazily) would keep the frozen cluster for later tests
    monkeypatch.setattr(registry, "open_backend", lambda kind, options, shared: cluster)
    config = tmp_path / "siteagent.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n", encoding="utf-8")
    site = open_site(loading.load(config))
    agent = Agent(site.backend, site.pricing, site.config.planner.policy)
    agent.cycle()
    buyer = AuthorizedClient("alice@laptop", Ed25519PrivateKey.generate().public_key(), "alice")
    deals = Deals(site.manager, Ed25519PrivateKey.generate(), "hpc1", None)
    app = create_app(ApiContext(site, agent, Trusting(buyer), deals, None))
    with TestClient(app) as http:
        yield ["--config", str(config)], http
    app.state.quotes.close()
    site.close()


def without_ids(answer: Dict[str, Any]) -> Dict[str, Any]:
    """An answer without what is fresh in every quote (offer ids)."""
    offers = [{k: v for k, v in offer.items() if k != "offer_id"} for offer in answer["offers"]]
    return {**answer, "offers": offers}


@pytest.mark.parametrize("argv, body", REQUESTS, ids=lambda item: str(item)[:24])
def test_the_cli_and_the_api_answer_the_same_quote(
    frozen: Tuple[List[str], TestClient],
    argv: List[str],
    body: Dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    site_options, http = frozen
    capsys.readouterr()
    code = main(["quote", *argv, *site_options, "--json"])
    cli = json.loads(capsys.readouterr().out)
    del cli["alternatives"]
    api = http.post("/v1/quotes", json=body)
    assert api.status_code == 200, api.text
    assert without_ids(cli) == without_ids(api.json())
    assert code == (0 if cli["status"] == "offered" else 3)


def test_a_request_for_cores_on_a_node_partition_is_for_the_nodes_holding_them(
    frozen: Tuple[List[str], TestClient],
) -> None:
    _, http = frozen
    answer = http.post("/v1/quotes", json={"cores": 32, "walltime": 2 * H}).json()
    assert answer["status"] == "offered"
    size = 2 if answer["unit"] == "node" else 32  # two 16-core nodes, or 32 cores
    assert {offer["cores"] for offer in answer["offers"]} == {size}


# --------------------------------------------------------------------------- confirm


def signed_confirm(http: TestClient, reservation: Dict[str, Any], key: Ed25519PrivateKey) -> Any:
    body = confirm_body(reservation["deal"], key, reservation["deal"]["buyer"])
    return http.post(f"/v1/reservations/{reservation['id']}/confirm", json=body)


def owner_read(http: TestClient, path: str, key: Ed25519PrivateKey, key_id: str) -> Any:
    """A GET signed by the buyer: the owner's view, receipt included."""
    headers = sign_request("GET", f"http://testserver{path}", b"", key, key_id)
    return http.get(path, headers=headers).json()


@pytest.fixture
def shared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[Tuple[List[str], TestClient, str, str]]:
    """One state directory served by the real composition of ``siteagent serve`` and used by
    the command line, with one authorized buyer: (site options, API, key id, key file)."""
    trace = write_trace(tmp_path / "t.swf", [(0, 36000, 8, 36000), (500000, 10, 1, 10)], 16)
    state = tmp_path / "state"
    assert main(["keys", str(tmp_path / "buyer"), "--key-id", "alice@laptop", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    state.mkdir()
    (state / "authorized_clients.yaml").write_text(made["authorized_clients"], encoding="utf-8")
    config = tmp_path / "siteagent.yaml"
    config.write_text(
        f"state_dir: {state}\nbackend: {{type: swf, swf: {{trace: {trace}, offset: 0}}}}\n",
        encoding="utf-8",
    )
    site = open_site(loading.load(config))
    parts = assemble(site)
    parts.agent.cycle()
    buyer = made["client"]["key_id"]
    parts.context.authenticator = Trusting(parts.authenticator.clients[buyer])
    app = create_app(parts.context)
    with TestClient(app) as http:
        yield ["--config", str(config)], http, buyer, made["files"]["client.key"]
    app.state.quotes.close()
    parts.deals.close()
    site.close()


def test_confirming_on_the_command_line_books_the_receipt_as_the_api_does(
    shared: Tuple[List[str], TestClient, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    site_options, http, buyer, key_file = shared
    key = load_private_key(Path(key_file))
    request = {"cores": 4, "walltime": H, "limit": 1}
    via_api, via_cli = (http.post("/v1/quotes", json=request).json()["offers"][0] for _ in "ab")
    accepted = http.post("/v1/reservations", json={"offer_id": via_api["offer_id"]}).json()
    api = signed_confirm(http, accepted, key)
    assert api.status_code == 200, api.text
    capsys.readouterr()
    accept = ["reservations", "accept", via_cli["offer_id"], "--client", buyer, "--json"]
    assert main([*accept, *site_options]) == 0
    tentative = json.loads(capsys.readouterr().out)["reservation"]
    confirm = ["reservations", "confirm", tentative["id"], "--client", buyer, "--json"]
    assert main([*confirm, "--signing-key", key_file, *site_options]) == 0
    cli = json.loads(capsys.readouterr().out)["reservation"]
    answers = (api.json(), cli)
    assert set(answers[0]) == set(answers[1])
    info = http.get("/v1/info").json()
    site_key, site_name = parse_public_key(info["public_key"]["value"]), info["site"]["name"]
    for answer in answers:
        receipt = Receipt.from_json(answer["receipt"])
        assert answer["state"] == "CONFIRMED" and receipt.deal == answer["deal"]
        assert signature_valid(receipt.countersigned(), receipt.site_signature, site_key)
        transaction = answer["ledger_transaction"]
        assert (transaction["kind"], transaction["receipt_id"]) == ("deal", receipt.id)
        entries = {e["account"]: e["amount"] for e in transaction["entries"]}
        assert entries == {buyer: f"-{answer['total']}", site_name: answer["total"]}
    shown = [owner_read(http, f"/v1/reservations/{a['id']}", key, buyer) for a in answers]
    assert [s["receipt"] for s in shown] == [a["receipt"] for a in answers]
    capsys.readouterr()
    assert main(["ledger", "balance", buyer, "--json", *site_options]) == 0
    balance = Decimal(json.loads(capsys.readouterr().out)["balance"])
    assert balance == -sum(Decimal(answer["total"]) for answer in answers)
