"""BPM's decisions from loads and contracts: which fragment to offer to whom, whether a host
accepts, and when load returns home."""

from __future__ import annotations

import pytest

from medusa.bpm.policy import Offer, choose_offer, decide, should_return
from medusa.catalog.model import ContractSpec
from medusa.contracts import Contract
from medusa.load import ParticipantLoad, cost

pytestmark = pytest.mark.unit

NOW = 10_000
F1, F2, F3 = "alpha/lr/f1", "alpha/lr/f2", "alpha/sensors/f1"


def _contract(name: str = "alpha/c1", host: str = "beta", price: float = 2.0,
              movable: tuple[str, ...] = ("alpha/lr",), **changes: object) -> Contract:
    terms = {"origin": "alpha", "host": host, "price": price, "delta": 0.4,
             "movable": list(movable), "proposed_by": "alpha", "status": "active",
             "accepted_at": 0, **changes}
    return Contract(name, ContractSpec.model_validate(terms), 1)


# alpha: 2 slots, 1.8 in use (u = 0.9, D = 9): f1 is the heaviest of its fragments; moving
# it (0.8 of load at 2 a unit) costs alpha 1.6, and saves it D(0.9) - D(0.5) = 8. Beta (u =
# 0.2) would pay D(0.6) - D(0.2) = 1.25 to take it, less than the 1.6 it is paid.
ALPHA = ParticipantLoad("alpha", 2.0, 1.8, {F1: 0.8, F2: 0.6, F3: 0.4})
BETA = ParticipantLoad("beta", 2.0, 0.4, {})


def test_the_fragment_whose_cost_most_exceeds_the_price_is_offered_at_the_top_price() -> None:
    offer = choose_offer(ALPHA, [F1, F2, F3], [_contract()], NOW)
    assert offer == Offer(F1, "alpha", "beta", "alpha/c1", 2.0, 0.8)
    assert ALPHA.marginal_cost(F1) > offer.payment


def test_nothing_is_offered_without_a_contract_that_covers_it_and_is_active() -> None:
    assert choose_offer(ALPHA, [F1, F2], [], NOW) is None
    assert choose_offer(ALPHA, [F3], [_contract()], NOW) is None  # lr only
    proposed = _contract(status="proposed", accepted_at=None)
    assert choose_offer(ALPHA, [F1], [proposed], NOW) is None
    ending = _contract(status="revoked", ends_at=NOW + 1000)
    assert choose_offer(ALPHA, [F1], [ending], NOW) is None
    betas = _contract(name="beta/c1", movable=("beta/x",), origin="beta", host="alpha",
                      proposed_by="beta")
    assert choose_offer(ALPHA, [F1], [betas], NOW) is None


def test_nothing_is_offered_when_moving_costs_more_than_keeping() -> None:
    light = ParticipantLoad("alpha", 2.0, 0.6, {F1: 0.3, F2: 0.3})
    assert choose_offer(light, [F1, F2], [_contract()], NOW) is None
    # A partner's fragment hosted here is not ours to offer.
    beta_heavy = ParticipantLoad("beta", 1.0, 0.9, {"alpha/lr/f1": 0.9})
    assert choose_offer(beta_heavy, ["alpha/lr/f1"], [_contract()], NOW) is None


def test_a_host_accepts_only_under_its_contract_in_range_and_when_it_gains() -> None:
    contract = _contract()
    offer = Offer(F1, "alpha", "beta", "alpha/c1", 2.0, 0.8)
    assert decide(BETA, offer, contract, NOW).accepted
    above = Offer(F1, "alpha", "beta", "alpha/c1", 2.5, 0.8)
    refused = decide(BETA, above, contract, NOW)
    assert not refused.accepted and "outside the contract's range [1.6, 2]" in refused.reason
    below = Offer(F1, "alpha", "beta", "alpha/c1", 1.5, 0.8)
    assert not decide(BETA, below, contract, NOW).accepted
    assert "no contract" in decide(BETA, offer, None, NOW).reason
    gamma = ParticipantLoad("gamma", 2.0, 0.0, {})
    refused = decide(gamma, offer, contract, NOW)
    assert not refused.accepted and "names beta as its host, not gamma" in refused.reason
    busy = ParticipantLoad("beta", 2.0, 1.5, {})
    refused = decide(busy, offer, contract, NOW)
    assert not refused.accepted and "more than the 1.600 paid" in refused.reason
    proposed = _contract(status="proposed", accepted_at=None)
    assert "is proposed" in decide(BETA, offer, proposed, NOW).reason
    uncovered = Offer(F3, "alpha", "beta", "alpha/c1", 2.0, 0.4)
    assert "does not cover" in decide(BETA, uncovered, contract, NOW).reason


def test_load_returns_when_the_contract_ends_or_home_is_cheaper() -> None:
    contract = _contract()
    after_move = ParticipantLoad("alpha", 2.0, 1.0, {F2: 0.6, F3: 0.4})
    assert should_return(after_move, F1, 0.8, contract, NOW) is None  # still dearer at home
    calm = ParticipantLoad("alpha", 2.0, 0.2, {F3: 0.2})
    assert cost(0.5) - cost(0.1) < 0.8 * 1.6
    assert "at home costs" in (should_return(calm, F1, 0.8, contract, NOW) or "")
    ended = _contract(status="revoked", ends_at=NOW - 1)
    assert should_return(after_move, F1, 0.8, ended, NOW) == "its contract is no longer in force"
    ending = _contract(status="revoked", ends_at=NOW + 1)
    assert should_return(calm, F1, 0.8, ending, NOW) is None
    # Just arrived at the partner: its load there still holds its hand-over's catch-up.
    assert should_return(calm, F1, 0.8, contract, NOW, settled=False) is None
    # Idle now, yet paid for at the load offered: at home it costs nothing, so it returns.
    assert "at home costs 0.000" in (should_return(after_move, F1, 0.0, contract, NOW,
                                                   paid=2.0 * 0.8) or "")
    assert should_return(after_move, F1, 0.0, contract, NOW) is None  # nothing paid, no gain


def test_a_fragment_that_has_only_just_started_is_not_offered() -> None:
    contract = _contract()
    fresh = ParticipantLoad("alpha", 2.0, 1.8, ALPHA.fragments, frozenset({F1}))
    offer = choose_offer(fresh, [F1, F2, F3], [contract], NOW)
    assert offer is not None and offer.fragment == F2  # F1 would cost most, but is unsettled
