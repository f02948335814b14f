"""BPM contract terms: states over time, what a contract covers, its price range, its
periods, and the terms it refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from medusa.catalog.model import ContractSpec
from medusa.contracts import Contract, ContractError

pytestmark = pytest.mark.unit

HOUR_MS = 3_600_000


def _contract(**changes: object) -> Contract:
    terms = {"origin": "alpha", "host": "beta", "price": 10.0, "delta": 2.0,
             "movable": ["alpha/linear-road", "alpha/sensors/f1"], "period_s": 3600.0,
             "proposed_by": "alpha", **changes}
    return Contract("alpha/alpha-beta-1", ContractSpec.model_validate(terms), 1)


def test_a_proposal_is_not_in_force_until_accepted() -> None:
    proposed = _contract()
    assert proposed.state(0) == "proposed" and not proposed.in_force(0)
    active = _contract(status="active", accepted_at=1000)
    assert active.state(5000) == "active" and active.in_force(5000)


def test_a_revoked_contract_stays_in_force_until_its_period_ends() -> None:
    revoked = _contract(status="revoked", accepted_at=0, ends_at=HOUR_MS)
    assert revoked.state(HOUR_MS - 1) == "ending" and revoked.in_force(HOUR_MS - 1)
    assert revoked.state(HOUR_MS) == "ended" and not revoked.in_force(HOUR_MS)


def test_periods_are_counted_from_the_acceptance() -> None:
    active = _contract(status="active", accepted_at=1000)
    assert active.period_end(1000) == 1000 + HOUR_MS
    assert active.period_end(1000 + HOUR_MS - 1) == 1000 + HOUR_MS
    assert active.period_end(1000 + HOUR_MS) == 1000 + 2 * HOUR_MS
    with pytest.raises(ContractError, match="never accepted"):
        _contract().period_end(0)


def test_it_covers_the_fragments_of_a_movable_network_and_named_fragments() -> None:
    contract = _contract()
    assert contract.covers("alpha/linear-road/alpha-node-1")
    assert contract.covers("alpha/sensors/f1")
    assert not contract.covers("alpha/sensors/f2")
    assert not contract.covers("alpha/other/f1")


def test_prices_within_the_range_only() -> None:
    contract = _contract()
    assert contract.low == 8.0
    assert contract.in_range(8.0) and contract.in_range(10.0) and contract.in_range(9.5)
    assert not contract.in_range(7.99) and not contract.in_range(10.01)


@pytest.mark.parametrize(("changes", "message"), [
    ({"host": "alpha"}, "two different parties"),
    ({"delta": 11.0}, "delta must not exceed price"),
    ({"proposed_by": "gamma"}, "neither the origin nor the host"),
    ({"movable": ["beta/linear-road"]}, "not load of the origin"),
    ({"movable": []}, "movable"),
    ({"movable": ["alpha"]}, "movable"),
    ({"status": "active"}, "accepted_at"),
    ({"status": "revoked", "accepted_at": 0}, "ends_at"),
    ({"period_s": 0}, "period_s"),
])
def test_bad_terms_are_refused_naming_the_field(changes: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _contract(**changes)
