"""What a participant's BPM agent decides, from loads and contracts alone (no I/O).

- **Offer.** Of its own fragments running on its own nodes, it offers the one whose marginal
  cost most exceeds what moving it would cost (the contract's price times the fragment's
  load) to the host of an in-force contract that covers it, at the contract's price p (the
  top of the range: the offer most attractive to the host). At most one offer at a time.
- **Accept.** A host accepts an offer only under an in-force contract naming it as host
  and covering the fragment, at a price within [p - delta, p], and only when its own
  marginal cost of taking the fragment is below what it is paid.
- **Return.** A fragment running at a partner goes back when the contract no longer is in
  force, or when the origin could now run it for less than it pays (the offer's price
  times the load offered, whatever it needs now: an idle fragment still costs that), with
  a margin so that a fragment does not bounce back and forth on noise.
- **Settling.** A fragment that started where it runs less than ``SETTLED_AFTER_S`` ago
  (deployed, moved or brought home) is neither offered nor brought home: its measured load
  still holds the slow batches of its start, and acting on it made load bounce.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from medusa.contracts import Contract
from medusa.load import ParticipantLoad

RETURN_MARGIN = 0.8
"""Load returns when running it at home costs less than this share of what is paid."""


@dataclass(frozen=True)
class Offer:
    fragment: str
    origin: str
    host: str
    contract: str
    unit_price: float
    load: float

    @property
    def payment(self) -> float:
        """What the origin pays per period for the fragment's load at this price."""
        return self.unit_price * self.load


@dataclass(frozen=True)
class Decision:
    accepted: bool
    reason: str


def choose_offer(me: ParticipantLoad, hosted_here: Iterable[str],
                 contracts: Iterable[Contract], at_ms: int,
                 excluded: AbstractSet[tuple[str, str]] = frozenset()) -> Offer | None:
    """The offer to make now, if any. ``hosted_here``: fragments running on my nodes;
    ``excluded``: (fragment, host) pairs not to offer now (refused a moment ago)."""
    best: tuple[float, Offer] | None = None
    for fragment in sorted(hosted_here):
        if fragment.split("/", 1)[0] != me.participant:
            continue  # a partner's load that I host: not mine to offer
        load = me.fragments.get(fragment, 0.0)
        if load <= 0 or fragment in me.unsettled:
            continue  # idle, or its load not known yet (it has just started here)
        marginal = me.marginal_cost(fragment)
        for contract in contracts:
            if contract.spec.origin != me.participant or not contract.covers(fragment) \
                    or contract.state(at_ms) != "active" \
                    or (fragment, contract.spec.host) in excluded:
                continue
            offer = Offer(fragment, me.participant, contract.spec.host, contract.name,
                          contract.spec.price, load)
            excess = marginal - offer.payment
            if excess > 0 and (best is None or excess > best[0]):
                best = (excess, offer)
    return best[1] if best else None


def decide(host: ParticipantLoad, offer: Offer, contract: Contract | None,
           at_ms: int) -> Decision:
    """Whether ``host`` takes ``offer``, and why."""
    if contract is None or contract.name != offer.contract:
        return Decision(False, f"no contract {offer.contract}")
    spec = contract.spec
    if host.participant != spec.host:
        return Decision(False, f"contract {contract.name} names {spec.host} as its host, "
                               f"not {host.participant}")
    if (spec.origin, spec.host) != (offer.origin, offer.host):
        return Decision(False, f"contract {contract.name} is from {spec.origin} to "
                               f"{spec.host}, not from {offer.origin} to {offer.host}")
    if contract.state(at_ms) != "active":
        return Decision(False, f"contract {contract.name} is {contract.state(at_ms)}")
    if not contract.covers(offer.fragment):
        return Decision(False, f"contract {contract.name} does not cover {offer.fragment}")
    if not contract.in_range(offer.unit_price):
        return Decision(False, f"price {offer.unit_price:g} is outside the contract's range "
                               f"[{contract.low:g}, {spec.price:g}]")
    taking = host.cost_of_taking(offer.load)
    if taking >= offer.payment:
        return Decision(False, f"taking it would cost {taking:.3f}, more than the "
                               f"{offer.payment:.3f} paid")
    return Decision(True, f"taking it costs {taking:.3f}, less than the {offer.payment:.3f} "
                          "paid")


def should_return(origin: ParticipantLoad, fragment: str, load: float,
                  contract: Contract | None, at_ms: int, settled: bool = True,
                  paid: float | None = None) -> str | None:
    """Why a fragment of ``origin`` running at a partner goes home now (None: it stays).
    ``load``: its load there now; ``settled``: whether that is known (it has run there
    long enough); ``paid``: what the origin pays a period for it (the price and load of
    the accepted offer; by default the contract's price times ``load``)."""
    if contract is None or not contract.in_force(at_ms):
        return "its contract is no longer in force"
    if contract.state(at_ms) == "ending" or not settled:
        return None  # paid to the end of the period; or it has only just arrived
    at_home = origin.cost_of_taking(load)
    if paid is None:
        paid = contract.spec.price * load
    if at_home < RETURN_MARGIN * paid:
        return f"running it at home costs {at_home:.3f}, less than the {paid:.3f} paid"
    return None
