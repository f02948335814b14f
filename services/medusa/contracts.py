"""BPM contracts: the offline agreements under which one participant's load may run on
another's nodes, at a price within a small fixed range (Balazinska et al., NSDI 2004).

A contract is filed in the catalog under the party that proposed it. It is *proposed*
until the other party accepts it, then *active*. Either party may revoke it: a proposal
ends at once, an active contract at the end of its current period (*ending* until then),
and the load under it returns to its origin. Periods are counted from the acceptance.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import ContractSpec, Entry, Kind
from medusa.errors import MedusaError

ContractState = Literal["proposed", "active", "ending", "ended"]


class ContractError(MedusaError, ValueError):
    """A contract action that the terms or the contract's state do not allow."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Contract:
    """A contract as stored, with what BPM asks of it."""

    name: str
    spec: ContractSpec
    version: int

    @classmethod
    def of(cls, entry: Entry) -> Contract:
        return cls(entry.name, ContractSpec.model_validate(entry.spec), entry.version)

    @property
    def low(self) -> float:
        """The lowest price of the range."""
        return self.spec.price - self.spec.delta

    def state(self, at_ms: int) -> ContractState:
        spec = self.spec
        if spec.status == "proposed":
            return "proposed"
        if spec.status == "revoked":
            assert spec.ends_at is not None
            return "ending" if at_ms < spec.ends_at else "ended"
        return "active"

    def in_force(self, at_ms: int) -> bool:
        """Whether load may run under it (active, or revoked but its period not over)."""
        return self.state(at_ms) in ("active", "ending")

    def covers(self, fragment: str) -> bool:
        """Whether a fragment (participant/network/fragment) may move under it."""
        network = fragment.rsplit("/", 1)[0]
        return fragment in self.spec.movable or network in self.spec.movable

    def in_range(self, price: float) -> bool:
        return self.low <= price <= self.spec.price

    def period_end(self, at_ms: int) -> int:
        """The end of the period ``at_ms`` falls in (periods start at the acceptance)."""
        started = self.spec.accepted_at
        if started is None:
            raise ContractError(f"contract {self.name} was never accepted: it has no periods")
        period_ms = int(self.spec.period_s * 1000)
        elapsed = max(0, at_ms - started)
        return started + (elapsed // period_ms + 1) * period_ms


def propose(catalog: CatalogClient, name: str, *, origin: str, host: str, price: float,
            delta: float, movable: list[str], period_s: float, by: str) -> Contract:
    """Files a new proposal under ``by`` (``name`` is the part after ``by/``)."""
    if by not in (origin, host):
        raise ContractError(f"--by: {by!r} is neither the origin {origin!r} nor the host "
                            f"{host!r}")
    try:
        spec = ContractSpec(origin=origin, host=host, price=price, delta=delta,
                            movable=movable, period_s=period_s, proposed_by=by)
    except ValidationError as error:
        raise ContractError("; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'contract'}: "
            f"{problem['msg'].removeprefix('Value error, ')}"
            for problem in error.errors())) from None
    full = f"{by}/{name}"
    if catalog.get(Kind.CONTRACTS, full) is not None:
        raise ContractError(f"contract {full} exists already")
    return Contract.of(catalog.put(Kind.CONTRACTS, full, spec.model_dump(mode="json")))


def accept(catalog: CatalogClient, name: str, *, by: str, at_ms: int | None = None
           ) -> Contract:
    """The other party accepts a proposal: the contract is active from now on."""

    def accepted(contract: ContractSpec, at: int) -> dict[str, Any]:
        if by == contract.proposed_by:
            raise ContractError(f"contract {name} was proposed by {by}: the other party "
                                f"({_other(contract, by)}) accepts it")
        if contract.status != "proposed":
            raise ContractError(f"contract {name} is {contract.status}, not proposed")
        return {**contract.model_dump(mode="json"), "status": "active", "accepted_at": at}

    return _as_party(catalog, name, by, at_ms, accepted)


def revoke(catalog: CatalogClient, name: str, *, by: str, at_ms: int | None = None
           ) -> Contract:
    """Either party revokes: a proposal ends now, an active contract with its period."""

    def revoked(contract: ContractSpec, at: int) -> dict[str, Any]:
        if contract.status == "revoked":
            raise ContractError(f"contract {name} is revoked already (it ends at "
                                f"{contract.ends_at})")
        ends = at if contract.status == "proposed" else \
            Contract(name, contract, 0).period_end(at)
        return {**contract.model_dump(mode="json"), "status": "revoked", "ends_at": ends}

    return _as_party(catalog, name, by, at_ms, revoked)


def contracts(catalog: CatalogClient, participant: str | None = None) -> list[Contract]:
    """Every contract, or those ``participant`` is a party to."""
    found = [Contract.of(entry) for entry in catalog.list(Kind.CONTRACTS)]
    return [c for c in found if participant is None or participant in c.spec.parties]


def _current(name: str, spec: dict[str, Any] | None) -> ContractSpec:
    if spec is None:
        raise ContractError(f"there is no contract {name}")
    return ContractSpec.model_validate(spec)


def _other(contract: ContractSpec, party: str) -> str:
    return contract.host if party == contract.origin else contract.origin


def _as_party(catalog: CatalogClient, name: str, by: str, at_ms: int | None,
              step: Callable[[ContractSpec, int], dict[str, Any]]) -> Contract:
    """Changes contract ``name`` as party ``by`` (read, checked, written; read again on a
    conflict): ``step`` gives the new terms, or refuses."""
    at = now_ms() if at_ms is None else at_ms

    def change(spec: dict[str, Any] | None) -> dict[str, Any]:
        contract = _current(name, spec)
        if by not in contract.parties:
            raise ContractError(f"--by: {by!r} is not a party to contract {name}")
        return step(contract, at)

    entry = catalog.update(Kind.CONTRACTS, name, change)
    assert entry is not None
    return Contract.of(entry)


def covering(catalog: CatalogClient, origin: str, host: str, fragment: str,
             at_ms: int | None = None) -> Contract | None:
    """The contract in force under which ``origin``'s ``fragment`` (participant/network/
    fragment) may run on ``host``, or None (the oldest when several do)."""
    at = now_ms() if at_ms is None else at_ms
    found = [c for c in contracts(catalog, origin) if c.spec.origin == origin
             and c.spec.host == host and c.in_force(at) and c.covers(fragment)]
    return min(found, key=lambda c: c.spec.accepted_at or 0) if found else None


def hosting(catalog: CatalogClient, origin: str, host: str, network: str,
            price: float = 1.0, period_s: float = 3600.0) -> Contract:
    """A contract in force under which ``host`` runs ``origin``'s ``network``: an existing
    one, or one proposed by the origin and accepted by the host (both parties act here,
    as an operator with both parties' consent does)."""
    found = covering(catalog, origin, host, f"{network}/*")
    if found is not None:
        return found
    name = f"{host}-hosts-{network.split('/', 1)[1]}"[:63]
    made = propose(catalog, name, origin=origin, host=host, price=price, delta=0.0,
                   movable=[network], period_s=period_s, by=origin)
    return accept(catalog, made.name, by=host)
