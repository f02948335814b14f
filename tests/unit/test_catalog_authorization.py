"""Who may write what in the catalog: the rules on their own, then through the HTTP API (over
an in-memory store) and the client."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from medusa import credentials
from medusa.catalog.api import create_app
from medusa.catalog.authorization import refusal
from medusa.catalog.client import CatalogClient, CatalogForbiddenError
from medusa.catalog.model import (
    ContractSpec,
    Entry,
    FragmentSpec,
    Kind,
    NodeSpec,
    OfferSpec,
    ParticipantSpec,
    key_of,
)
from medusa.catalog.store import CatalogStore, VersionConflictError
from medusa.credentials import ADMIN

pytestmark = pytest.mark.unit

FRAGMENT = "alpha/lr/f1"


def _fragment(**changes: Any) -> dict[str, Any]:
    spec = FragmentSpec.model_validate({"network": "alpha/lr", "boxes": ["b1"],
                                        "node": "alpha/n1", **changes})
    return spec.model_dump(mode="json")


def _contract(**changes: Any) -> dict[str, Any]:
    return ContractSpec.model_validate({
        "origin": "alpha", "host": "beta", "price": 10.0, "movable": ["alpha/lr"],
        "proposed_by": "alpha", **changes}).model_dump(mode="json")


def _offer(**changes: Any) -> dict[str, Any]:
    return OfferSpec.model_validate({
        "fragment": FRAGMENT, "origin": "alpha", "host": "beta", "contract": "alpha/c1",
        "unit_price": 9.0, "load": 0.5, **changes}).model_dump(mode="json")


RUNNING_ON_BETA = _fragment(node="beta/n1", phase="running", checkpoint="/cp/beta/f1")
MOVING_TO_GAMMA = _fragment(node="gamma/n1", phase="moving", checkpoint="/cp/beta/f1")
ACTIVE = _contract(status="active", accepted_at=1000)
ACCEPTED = _offer(status="accepted", node="beta/n1", decided_at=5)

ALLOWED: list[tuple[str, str, Kind, str, dict[str, Any] | None, dict[str, Any] | None]] = [
    ("own participant", "alpha", Kind.PARTICIPANTS, "alpha", None, {"kafka_bootstrap": "k"}),
    ("own node", "alpha", Kind.NODES, "alpha/n1", None, {"status": "up"}),
    ("own node reports its Spark UI", "alpha", Kind.NODES, "alpha/n1",
     {"status": "failed", "incarnation": "a", "spark_ui": "http://127.0.0.1:4040"},
     {"status": "up", "incarnation": "b", "spark_ui": "http://127.0.0.1:4041"}),
    ("own node stopped without its Spark UI", "alpha", Kind.NODES, "alpha/n1",
     {"status": "up", "spark_ui": "http://127.0.0.1:4040"}, {"status": "down", "spark_ui": None}),
    ("admin marks a node failed, keeping its Spark UI", ADMIN, Kind.NODES, "alpha/n1",
     {"status": "up", "spark_ui": "http://127.0.0.1:4040"},
     {"status": "failed", "spark_ui": "http://127.0.0.1:4040"}),
    ("own stream", "alpha", Kind.STREAMS, "alpha/s", None, {"topic": "t"}),
    ("own network", "alpha", Kind.NETWORKS, "alpha/lr", {"definition": "a"}, None),
    ("own fragment, placed on a partner's node", "alpha", Kind.FRAGMENTS, FRAGMENT,
     _fragment(), _fragment(node="beta/n1")),
    ("own fragment withdrawn", "alpha", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA, None),
    ("hosted fragment marked running", "beta", Kind.FRAGMENTS, FRAGMENT,
     _fragment(node="beta/n1", phase="released", released_by="alpha/n1",
               checkpoint="/cp/alpha/f1"),
     _fragment(node="beta/n1", phase="running", checkpoint="/cp/beta/f1")),
    ("hosted fragment's failure", "beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "error": "boom", "restarts": 2, "dpc_state": "UP_FAILURE"}),
    ("replica on the participant's node ready", "beta", Kind.FRAGMENTS, FRAGMENT,
     _fragment(ha="active", replica="beta/n2"),
     _fragment(ha="active", replica="beta/n2", replica_ready=True)),
    ("warm target ready", "beta", Kind.FRAGMENTS, FRAGMENT,
     {**RUNNING_ON_BETA, "warm_target": "beta/n2"},
     {**RUNNING_ON_BETA, "warm_target": "beta/n2", "warm_ready": True}),
    ("reader-side replica serves", "beta", Kind.FRAGMENTS, FRAGMENT,
     _fragment(phase="running", reader_replica="beta/n2"),
     _fragment(phase="running", reader_replica="beta/n2", serving="beta/n2")),
    ("old node releases it to the new one", "beta", Kind.FRAGMENTS, FRAGMENT, MOVING_TO_GAMMA,
     {**MOVING_TO_GAMMA, "phase": "released", "released_by": "beta/n1"}),
    ("contract proposed by its origin", "alpha", Kind.CONTRACTS, "alpha/c1", None, _contract()),
    ("contract accepted by the other party", "beta", Kind.CONTRACTS, "alpha/c1", _contract(),
     ACTIVE),
    ("proposer changes its proposal", "alpha", Kind.CONTRACTS, "alpha/c1", _contract(),
     _contract(price=12.0)),
    ("contract revoked by a party", "beta", Kind.CONTRACTS, "alpha/c1", ACTIVE,
     {**ACTIVE, "status": "revoked", "ends_at": 5000}),
    ("contract removed by a party", "beta", Kind.CONTRACTS, "alpha/c1", ACTIVE, None),
    ("offer made by its origin", "alpha", Kind.OFFERS, "alpha/o1", None, _offer()),
    ("offer accepted by its host", "beta", Kind.OFFERS, "alpha/o1", _offer(), ACCEPTED),
    ("offer refused by its host", "beta", Kind.OFFERS, "alpha/o1", _offer(),
     _offer(status="refused", reason="full")),
    ("offer done by its origin", "alpha", Kind.OFFERS, "alpha/o1", ACCEPTED,
     {**ACCEPTED, "status": "done"}),
    ("admin re-places another's fragment", ADMIN, Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "node": "gamma/n1", "phase": "released", "released_by": "beta/n1"}),
    ("admin changes a participant", ADMIN, Kind.PARTICIPANTS, "alpha", None, None),
    ("admin accepts any contract", ADMIN, Kind.CONTRACTS, "alpha/c1", _contract(), ACTIVE),
]

REFUSED: list[tuple[str, Kind, str, dict[str, Any] | None, dict[str, Any] | None, str]] = [
    ("beta", Kind.PARTICIPANTS, "alpha", None, {"kafka_bootstrap": "k"},
     "participant beta cannot change participant alpha: it is alpha's"),
    ("beta", Kind.NODES, "alpha/n1", {"status": "up"}, {"status": "failed"},
     "participant beta cannot change node alpha/n1: it is alpha's"),
    ("beta", Kind.NODES, "alpha/n1", {"status": "up", "spark_ui": "http://127.0.0.1:4040"},
     {"status": "up", "spark_ui": "http://127.0.0.1:9999"},
     "participant beta cannot change node alpha/n1: it is alpha's"),
    ("beta", Kind.STREAMS, "alpha/s", {"topic": "t"}, None,
     "participant beta cannot remove stream alpha/s: it is alpha's"),
    ("beta", Kind.NETWORKS, "alpha/lr", None, {"definition": "a"},
     "participant beta cannot change network alpha/lr: it is alpha's"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, _fragment(), _fragment(error="x"),
     "participant beta cannot change fragment alpha/lr/f1: it is alpha's and not hosted on "
     "a node of beta"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, _fragment(), _fragment(node="beta/n1"),
     "it is alpha's and not hosted on a node of beta"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, None, _fragment(node="beta/n1"),
     "only alpha places or withdraws it"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA, None,
     "participant beta cannot remove fragment alpha/lr/f1: it is alpha's, and only alpha"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA, {**RUNNING_ON_BETA, "node": "gamma/n1"},
     "only alpha changes its node"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA, {**RUNNING_ON_BETA, "node": "beta/n2"},
     "only alpha changes its node"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "replica": "gamma/n1", "ha": "active"}, "only alpha changes its "
     "ha, replica"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "reads": [{"participant": "alpha", "topic": "alpha.secrets"}]},
     "only alpha changes its reads"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "contract": "alpha/c9"}, "only alpha changes its contract"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "boxes": ["b1", "b2"]}, "only alpha changes its boxes"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "warm_target": "gamma/n1"}, "only alpha starts a warm move"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "phase": "released", "released_by": "gamma/n1"},
     "released_by gamma/n1 is not a node of beta"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, _fragment(reader_replica="beta/n2"),
     _fragment(reader_replica="beta/n2", serving="beta/n9"),
     "serving beta/n9 is not its reader-side replica"),
    ("beta", Kind.FRAGMENTS, FRAGMENT, _fragment(reader_replica="beta/n2"),
     _fragment(reader_replica="beta/n3"), "only alpha changes its reader_replica"),
    ("delta", Kind.FRAGMENTS, FRAGMENT, MOVING_TO_GAMMA,
     {**MOVING_TO_GAMMA, "phase": "released", "released_by": "delta/n1",
      "checkpoint": "/cp/delta/forged"}, "releases it with the checkpoint it names"),
    ("delta", Kind.FRAGMENTS, FRAGMENT, RUNNING_ON_BETA,
     {**RUNNING_ON_BETA, "phase": "released", "released_by": "delta/n1"},
     "it is alpha's and not hosted on a node of delta"),
    ("gamma", Kind.CONTRACTS, "alpha/c1", None, _contract(),
     "participant gamma cannot change contract alpha/c1: it would be between alpha and beta, "
     "not gamma"),
    ("gamma", Kind.CONTRACTS, "alpha/c1", ACTIVE, None, "it is between alpha and beta"),
    ("beta", Kind.CONTRACTS, "alpha/c1", None, _contract(),
     "it is filed under alpha, and only alpha proposes it"),
    ("alpha", Kind.CONTRACTS, "alpha/c1", _contract(), ACTIVE,
     "only when the party that did not propose it (beta) accepts the proposal"),
    ("beta", Kind.CONTRACTS, "alpha/c1", {**ACTIVE, "status": "revoked", "ends_at": 5000},
     ACTIVE, "only when the party that did not propose it"),
    ("beta", Kind.CONTRACTS, "alpha/c1", _contract(), _contract(price=20.0),
     "only its proposer alpha changes its terms (price)"),
    ("alpha", Kind.CONTRACTS, "alpha/c1", ACTIVE, {**ACTIVE, "price": 20.0},
     "only while it is proposed"),
    ("gamma", Kind.OFFERS, "alpha/o1", _offer(), ACCEPTED, "it is between alpha and beta"),
    ("beta", Kind.OFFERS, "alpha/o1", None, _offer(), "only its origin alpha makes it"),
    ("alpha", Kind.OFFERS, "alpha/o1", _offer(), {**ACCEPTED, "node": "alpha/n1"},
     "only its host beta answers it"),
    ("beta", Kind.OFFERS, "alpha/o1", _offer(), {**ACCEPTED, "unit_price": 99.0},
     "its terms (unit_price) do not change"),
    ("beta", Kind.OFFERS, "alpha/o1", _offer(), {**ACCEPTED, "node": "gamma/n1"},
     "node gamma/n1 is not a node of its host beta"),
]


@pytest.mark.parametrize(("case", "principal", "kind", "name", "current", "new"), ALLOWED,
                         ids=[case[0] for case in ALLOWED])
def test_allowed_writes(case: str, principal: str, kind: Kind, name: str,
                        current: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    assert refusal(principal, kind, name, current, new) is None


@pytest.mark.parametrize(("principal", "kind", "name", "current", "new", "reason"), REFUSED)
def test_refused_writes_say_who_what_and_why(principal: str, kind: Kind, name: str,
                                             current: dict[str, Any] | None,
                                             new: dict[str, Any] | None, reason: str) -> None:
    refused = refusal(principal, kind, name, current, new)
    assert refused is not None
    assert refused.startswith(f"participant {principal} cannot ")
    assert f"{kind.singular} {name}" in refused
    assert reason in refused


def test_a_field_missing_from_an_older_entry_counts_as_its_default() -> None:
    older = {k: v for k, v in RUNNING_ON_BETA.items() if k not in ("ha", "instance", "reads")}
    assert refusal("beta", Kind.FRAGMENTS, FRAGMENT, older, {**RUNNING_ON_BETA, "error": "x"}) \
        is None


# -- the HTTP API ----------------------------------------------------------------------------

TOKENS = {"alpha-secret-token-1234": "alpha", "beta-secret-token-5678": "beta",
          "admin-secret-token-9012": ADMIN}
ALPHA, BETA = "alpha-secret-token-1234", "beta-secret-token-5678"
NETWORK = "name: lr\nparticipant: alpha\nboxes: {b1: {}}\n"


class MemoryStore:
    """The part of ``CatalogStore`` the API uses, in memory, with its version checks."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self.revision = 0

    def get(self, kind: Kind, name: str) -> Entry | None:
        return self._entries.get(key_of(kind, name))

    def entries(self, kind: Kind, prefix: str = "") -> list[Entry]:
        start = key_of(kind, prefix)
        return sorted((e for k, e in self._entries.items() if k.startswith(start)),
                      key=lambda e: e.name)

    def put(self, kind: Kind, name: str, spec: dict[str, Any], expected: int | None) -> Entry:
        current = self.get(kind, name)
        actual = current.version if current else None
        if actual != expected:
            raise VersionConflictError(kind, name, expected, actual)
        entry = Entry(kind=kind, name=name, version=(actual or 0) + 1,
                      updated_at=int(time.time() * 1000), spec=spec)
        self._entries[key_of(kind, name)] = entry
        self.revision += 1
        return entry

    def delete(self, kind: Kind, name: str, expected: int | None) -> Entry:
        current = self.get(kind, name)
        if current is None or (expected is not None and current.version != expected):
            raise VersionConflictError(kind, name, expected,
                                       current.version if current else None)
        del self._entries[key_of(kind, name)]
        self.revision += 1
        return current

    @property
    def size(self) -> int:
        return len(self._entries)


@pytest.fixture
def store() -> MemoryStore:
    store = MemoryStore()
    for participant in ("alpha", "beta"):
        store.put(Kind.PARTICIPANTS, participant,
                  ParticipantSpec(kafka_bootstrap=f"{participant}:9092").model_dump(), None)
    for node in ("alpha/n1", "beta/n1"):
        store.put(Kind.NODES, node, NodeSpec().model_dump(mode="json"), None)
    store.put(Kind.NETWORKS, "alpha/lr", {"definition": NETWORK}, None)
    store.put(Kind.FRAGMENTS, FRAGMENT, _fragment(node="beta/n1"), None)
    return store


def _app(store: MemoryStore, tokens: dict[str, str] | None = TOKENS) -> FastAPI:
    return create_app(cast(CatalogStore, store), tokens=tokens)


@pytest.fixture
def api(store: MemoryStore) -> TestClient:
    return TestClient(_app(store))


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


NEW_NODE = {"spec": {"status": "up"}}


def test_a_write_without_a_token_is_unauthenticated(api: TestClient,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="medusa.catalog"):
        response = api.put("/v1/nodes/alpha/n2", json=NEW_NODE)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "need a participant's token (Authorization: Bearer ...)" in response.json()["detail"]
    assert "PUT /v1/nodes/alpha/n2" in caplog.text
    assert api.delete("/v1/nodes/alpha/n1").status_code == 401


@pytest.mark.parametrize("header", [f"Bearer {ALPHA}x", "Bearer wrong", f"Basic {ALPHA}"])
def test_an_unknown_token_is_unauthenticated_and_never_shown(
        api: TestClient, caplog: pytest.LogCaptureFixture, header: str) -> None:
    with caplog.at_level(logging.DEBUG):
        response = api.put("/v1/nodes/alpha/n2", json=NEW_NODE,
                           headers={"Authorization": header})
    assert response.status_code == 401
    presented = header.split(" ", 1)[1]
    assert presented not in response.text and presented not in caplog.text
    assert ALPHA not in caplog.text


def test_another_participants_entity_is_forbidden(api: TestClient, store: MemoryStore,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        response = api.put("/v1/nodes/alpha/n2", json=NEW_NODE, headers=_bearer(BETA))
        deleted = api.delete("/v1/nodes/alpha/n1", headers=_bearer(BETA))
    assert response.status_code == 403
    assert response.json()["detail"] == ("participant beta cannot change node alpha/n2: "
                                         "it is alpha's")
    assert deleted.status_code == 403 and store.get(Kind.NODES, "alpha/n1") is not None
    refusals = [r for r in caplog.records if r.name == "medusa.catalog"
                and r.levelno == logging.WARNING]
    assert [("PUT" in r.getMessage(), "DELETE" in r.getMessage()) for r in refusals] == [
        (True, False), (False, True)]
    assert all("beta" in r.getMessage() and "alpha/n" in r.getMessage() for r in refusals)
    assert BETA not in response.text + deleted.text + caplog.text
    assert store.get(Kind.NODES, "alpha/n2") is None


def test_a_participant_writes_its_own_entities(api: TestClient, store: MemoryStore) -> None:
    response = api.put("/v1/nodes/alpha/n2", json=NEW_NODE, headers=_bearer(ALPHA))
    assert response.status_code == 200 and response.json()["version"] == 1
    assert ALPHA not in response.text
    assert api.delete("/v1/nodes/alpha/n2", headers=_bearer(ALPHA)).status_code == 200
    assert store.get(Kind.NODES, "alpha/n2") is None


def test_a_node_reports_its_spark_ui_through_its_participant_only(api: TestClient,
                                                                    store: MemoryStore) -> None:
    registered = {"spec": {"status": "up", "incarnation": "i2",
                           "spark_ui": "http://127.0.0.1:4041"}, "version": 1}
    assert api.put("/v1/nodes/alpha/n1", json=registered,
                   headers=_bearer(BETA)).status_code == 403
    response = api.put("/v1/nodes/alpha/n1", json=registered, headers=_bearer(ALPHA))
    assert response.status_code == 200
    assert store.get(Kind.NODES, "alpha/n1").spec["spark_ui"] == "http://127.0.0.1:4041"
    # A console links to it: nothing but an http(s) URL is taken.
    scripted = {"spec": {"status": "up", "spark_ui": "javascript:alert(1)"}, "version": 2}
    assert api.put("/v1/nodes/alpha/n1", json=scripted,
                   headers=_bearer(ALPHA)).status_code == 422


def test_a_host_reports_on_a_fragment_it_runs_but_cannot_move_it(api: TestClient) -> None:
    running = {"spec": _fragment(node="beta/n1", phase="running", checkpoint="/cp"),
               "version": 1}
    assert api.put(f"/v1/fragments/{FRAGMENT}", json=running,
                   headers=_bearer(BETA)).status_code == 200
    moved = {"spec": _fragment(node="alpha/n1", phase="running"), "version": 2}
    refused = api.put(f"/v1/fragments/{FRAGMENT}", json=moved, headers=_bearer(BETA))
    assert refused.status_code == 403 and "only alpha changes its node" in refused.text
    assert api.put(f"/v1/fragments/{FRAGMENT}", json=moved,
                   headers=_bearer(ALPHA)).status_code == 200


def test_a_stale_write_is_a_conflict_for_the_version_it_was_authorized_against(
        api: TestClient) -> None:
    stale = {"spec": _fragment(node="beta/n1", phase="running"), "version": 7}
    assert api.put(f"/v1/fragments/{FRAGMENT}", json=stale,
                   headers=_bearer(BETA)).status_code == 409


def test_reads_stay_open(api: TestClient) -> None:
    assert api.get("/v1/nodes/alpha/n1").status_code == 200
    assert [e["name"] for e in api.get("/v1/nodes").json()] == ["alpha/n1", "beta/n1"]
    assert api.get("/health").json()["entries"] == 6
    security = api.get("/openapi.json").json()["components"]["securitySchemes"]
    assert security["HTTPBearer"]["scheme"] == "bearer"


def test_without_tokens_writes_are_open(store: MemoryStore) -> None:
    api = TestClient(_app(store, tokens=None))
    assert api.put("/v1/nodes/alpha/n2", json=NEW_NODE).status_code == 200


# -- the client --------------------------------------------------------------------------------

def _over(app: FastAPI, catalog: CatalogClient) -> CatalogClient:
    """``catalog`` talking to ``app`` in process, with the headers it would send."""
    headers = catalog._http.headers
    catalog._http.close()
    catalog._http = TestClient(app, base_url=catalog.url, headers=headers)
    return catalog


def test_the_client_sends_its_token_and_reports_a_refusal(store: MemoryStore) -> None:
    app = _app(store)
    with _over(app, CatalogClient("http://catalog", token=BETA)) as catalog:
        with pytest.raises(CatalogForbiddenError) as refused:
            catalog.put(Kind.NODES, "alpha/n2", {"status": "up"})
        assert refused.value.status == 403
        assert str(refused.value) == ("catalog: participant beta cannot change node alpha/n2: "
                                      "it is alpha's")
        assert catalog.put(Kind.NODES, "beta/n2", {"status": "up"}).version == 1
    with _over(app, CatalogClient("http://catalog", anonymous=True)) as anonymous, \
            pytest.raises(CatalogForbiddenError, match="need a participant's token") as missing:
        anonymous.put(Kind.NODES, "beta/n3", {"status": "up"})
    assert missing.value.status == 401


def test_a_process_acts_with_its_principals_token(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEDUSA_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("MEDUSA_CREDENTIALS_FILE", raising=False)
    monkeypatch.setenv(credentials.PARTICIPANT_VARIABLE, "beta")
    with CatalogClient("http://catalog") as unsecured:
        assert "Authorization" not in unsecured._http.headers
    stack = credentials.ensure(credentials.credentials_file(tmp_path), ["alpha", "beta"])
    with CatalogClient("http://catalog") as catalog:
        assert catalog._http.headers["Authorization"] == \
            f"Bearer {stack.secret('beta').token}"
        assert stack.secret("beta").token not in repr(catalog._http.headers)
    monkeypatch.delenv(credentials.PARTICIPANT_VARIABLE)
    with CatalogClient("http://catalog") as operator:
        assert operator._http.headers["Authorization"] == \
            f"Bearer {stack.secret(ADMIN).token}"
