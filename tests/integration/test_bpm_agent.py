"""The BPM agents of two participants against a catalog of their own (the real service):
an overloaded origin offers a fragment under an active contract, the host accepts and the
fragment moves; nothing moves without a contract; an offer outside the range is refused;
an unanswered offer is withdrawn; load stays where it is while home is dearer, and goes
home when its contract ends; load its network placed at a partner is never brought home.
Loads come from fixed reports and moves only retarget the fragment in the catalog: the
moves themselves are tested with Spark in the e2e tests."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from medusa.bpm.ledger import Ledger, balances, read_entries
from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.contracts import accept, propose, revoke
from medusa.settings import kafka_config
from medusa_apps.bpm_agent import BpmAgent
from tests.federation_processes import CatalogProcess, federation_env
from tests.integration.test_catalog import NETWORK

pytestmark = pytest.mark.integration

FRAGMENT = "alpha/counts/f0"


class Federation:
    """Fixed load reports, and moves that retarget the fragment in the catalog."""

    def __init__(self, catalog: CatalogClient, ledger: Ledger) -> None:
        self.catalog = catalog
        self.ledger = ledger
        self.reports: dict[str, dict[str, Any]] = {}
        self.moves: list[tuple[str, str]] = []
        self.load(alpha=0.95, beta=0.0)

    def load(self, alpha: float, beta: float, fragment_on: str = "alpha") -> None:
        """Node loads: the fragment's (0.9) on its host, the rest another fragment's."""
        for participant, load, capacity in (("alpha", alpha, 1.0), ("beta", beta, 2.0)):
            here = participant == fragment_on
            fragments = [{"fragment": FRAGMENT, "load": 0.9}] if here else []
            fragments.append({"fragment": f"{participant}/other/f0",
                              "load": round(load - (0.9 if here else 0.0), 6)})
            self.reports[f"{participant}/n1"] = {
                "node": f"{participant}/n1", "participant": participant, "capacity": capacity,
                "load": load, "fragments": fragments}

    def move(self, catalog: CatalogClient, fragment: str, node: str,
             _parent: str | None, _contract: str | None) -> None:
        catalog.update(Kind.FRAGMENTS, fragment,
                       lambda spec: None if spec is None else {**spec, "node": node})
        self.moves.append((fragment, node))

    def agent(self, participant: str, **options: Any) -> BpmAgent:
        return BpmAgent(participant, self.catalog, lambda: self.reports, move=self.move,
                        ledger=self.ledger if participant == "alpha" else None, **options)

    def node_of_fragment(self) -> str:
        entry = self.catalog.get(Kind.FRAGMENTS, FRAGMENT)
        assert entry is not None
        return str(entry.spec["node"])


@pytest.fixture
def federated(federation, registry, tmp_path) -> Iterator[Federation]:
    process = CatalogProcess(federation, tmp_path).start()
    ledger = Ledger(kafka_config(federation.bootstrap("alpha")), registry, "alpha")
    try:
        with CatalogClient(process.url) as catalog:
            for node in ("alpha/n1", "beta/n1"):
                catalog.put(Kind.NODES, node, {})
            catalog.put(Kind.NETWORKS, "alpha/counts", {"definition": NETWORK})
            catalog.put(Kind.FRAGMENTS, FRAGMENT, {"network": "alpha/counts", "boxes": ["hot"],
                                                   "node": "alpha/n1", "phase": "running"})
            yield Federation(catalog, ledger)
    finally:
        ledger.close()
        process.stop()


def _contract(catalog: CatalogClient, price: float = 10.0, delta: float = 2.0) -> str:
    # Named apart: the ledger topic outlives this test's catalog.
    made = propose(catalog, f"c-{uuid.uuid4().hex[:8]}", origin="alpha", host="beta",
                   price=price, delta=delta,
                   movable=["alpha/counts"], period_s=3600, by="alpha")
    accept(catalog, made.name, by="beta")
    return made.name


def test_an_overloaded_origin_offers_the_host_accepts_and_the_fragment_moves(
        federated, federation, registry, tmp_path) -> None:
    contract = _contract(federated.catalog)
    alpha, beta = federated.agent("alpha"), federated.agent("beta")
    assert (alpha.step() or "").startswith(f"offered {FRAGMENT} to beta under {contract}")
    assert alpha.step() is None, "one offer in flight at a time"
    answer = beta.step() or ""
    assert answer.startswith("accepted, on beta/n1 offer"), answer
    [offer] = federated.catalog.list(Kind.OFFERS)
    assert (offer.spec["status"], offer.spec["unit_price"], offer.spec["node"]) == (
        "accepted", 10.0, "beta/n1")
    assert (alpha.step() or "").startswith(f"moved {FRAGMENT} to beta/n1")
    assert federated.node_of_fragment() == "beta/n1"
    assert federated.catalog.list(Kind.OFFERS)[0].spec["status"] == "done"

    # Just arrived: no report lists it yet (beta's is from before it came): it stays, as
    # much as it would cost nothing at home.
    federated.load(alpha=0.05, beta=0.0, fragment_on="nowhere")
    assert alpha.step() is None and federated.node_of_fragment() == "beta/n1"
    # Now on beta: home (u 0 -> 0.9, D 9) is dearer than 0.8 of the 9 paid: it stays.
    federated.load(alpha=0.0, beta=0.9, fragment_on="beta")
    assert alpha.step() is None and beta.step() is None
    # Revoked, the contract runs to the end of its period; then load goes home.
    ends = revoke(federated.catalog, contract, by="beta").spec.ends_at
    assert ends is not None
    assert alpha.step(at_ms=ends - 1) is None
    assert "its contract is no longer in force" in (alpha.step(at_ms=ends) or "")
    assert federated.node_of_fragment() == "alpha/n1"

    # The ledger: the move at the unit price times the load, and the hosting from the move
    # to the contract's end, pro rata of its one-hour period; once each, even read again.
    entries = [e for e in read_entries([kafka_config(federation.bootstrap(p))
                                        for p in ("alpha", "beta")], registry)
               if e["contract"] == contract]
    assert [e["kind"] for e in entries] == ["move", "hosting"], [
        (e["kind"], e["from_ms"], e["to_ms"], e["amount"]) for e in entries]
    move, hosting = entries
    assert move["amount"] == pytest.approx(9.0)
    assert hosting["to_ms"] == ends and hosting["from_ms"] == move["to_ms"]
    held_ms = hosting["to_ms"] - hosting["from_ms"]
    assert hosting["amount"] == pytest.approx(10.0 * 0.9 * held_ms / 3_600_000)
    paid = balances(entries)
    assert paid.participants["beta"] == pytest.approx(-paid.participants["alpha"])
    assert paid.contracts[contract] == pytest.approx(move["amount"] + hosting["amount"])
    # A restarted agent that read the ledger pays nothing twice.
    again = BpmAgent("alpha", federated.catalog, lambda: federated.reports,
                     move=federated.move, ledger=federated.ledger, paid=entries)
    assert again.paid_until[(contract, FRAGMENT)] == ends
    shown = subprocess.run([sys.executable, "-m", "medusa_apps", "ledger"], capture_output=True,
                           text=True, timeout=120, check=False,
                           env={**federation_env(federation, tmp_path), "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if contract in line)
    assert f"{paid.contracts[contract]:,.4f}" in row


def test_nothing_moves_without_a_contract_or_when_the_host_would_lose(federated) -> None:
    alpha, beta = federated.agent("alpha"), federated.agent("beta")
    assert alpha.step() is None, "no contract: no offer"
    _contract(federated.catalog)
    federated.load(alpha=0.95, beta=1.9)  # beta nearly full: taking 0.9 costs it far more
    assert (alpha.step() or "").startswith("offered")
    answer = beta.step() or ""
    assert answer.startswith("refused offer") and "more than the 9.000 paid" in answer, answer
    assert alpha.step() is None, "a refused offer is not made again while nothing changed"
    assert federated.moves == []


def test_load_its_network_placed_at_a_partner_is_never_brought_home(federated) -> None:
    # Placed on beta by its network (as sensor_pair's boxes are), with no offer behind it:
    # neither the lack of a contract nor a cheaper home moves it.
    federated.catalog.update(Kind.FRAGMENTS, FRAGMENT,
                             lambda spec: None if spec is None else {**spec, "node": "beta/n1"})
    federated.load(alpha=0.0, beta=0.95, fragment_on="beta")
    alpha = federated.agent("alpha")
    assert alpha.step() is None
    _contract(federated.catalog)
    assert alpha.step() is None
    assert federated.moves == [] and federated.node_of_fragment() == "beta/n1"


def test_an_offer_outside_the_range_is_refused_naming_it(federated) -> None:
    contract = _contract(federated.catalog)
    federated.catalog.put(Kind.OFFERS, "alpha/offer-high", {
        "fragment": FRAGMENT, "origin": "alpha", "host": "beta", "contract": contract,
        "unit_price": 12.0, "load": 0.9})
    answer = federated.agent("beta").step() or ""
    assert "refused" in answer and "outside the contract's range [8, 10]" in answer
    assert federated.node_of_fragment() == "alpha/n1"


def test_an_unanswered_offer_is_withdrawn(federated) -> None:
    _contract(federated.catalog)
    alpha = federated.agent("alpha", offer_timeout_s=5)
    assert (alpha.step(at_ms=1_000) or "").startswith("offered")
    assert alpha.step(at_ms=2_000) is None
    assert (alpha.step(at_ms=7_000) or "").startswith("withdrew offer")
    assert federated.moves == []
