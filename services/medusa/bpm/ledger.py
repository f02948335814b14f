"""BPM's ledger: what each origin paid each host under each contract.

Entries go to ``medusa.ledger`` on the paying participant's cluster, each with an id made
of what it pays for, so that reading the ledger again (after a restart, or from another
participant) counts every payment once. An origin pays:
- for a *move*: the unit price times the load moved, once, at the hand-over;
- for *hosting*: the unit price times the load for each period (of the contract, counted
  from its acceptance) the host ran it, pro rata for the first and last stretch.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.consuming import TupleConsumer
from medusa.producing import TupleProducer
from medusa.schemas import LEDGER_TOPIC, epoch_ms, load_schema
from medusa.topics import ensure_topics


@dataclass(frozen=True)
class Payment:
    kind: str
    """``move`` or ``hosting``."""
    contract: str
    origin: str
    host: str
    fragment: str
    unit_price: float
    load: float
    from_ms: int
    to_ms: int

    @property
    def amount(self) -> float:
        if self.kind == "move":
            return self.unit_price * self.load
        raise ValueError("a hosting payment's amount depends on the contract's period: "
                         "use hosting_amount")

    @property
    def entry_id(self) -> str:
        return f"ledger/{self.contract}/{self.fragment}/{self.kind}/{self.from_ms}"


def hosting_amount(unit_price: float, load: float, from_ms: int, to_ms: int,
                   period_s: float) -> float:
    """What running ``load`` from ``from_ms`` to ``to_ms`` costs: pro rata of periods."""
    return unit_price * load * max(0, to_ms - from_ms) / (period_s * 1000)


def entry(payment: Payment, amount: float) -> dict[str, Any]:
    return {"kind": payment.kind, "contract": payment.contract, "origin": payment.origin,
            "host": payment.host, "fragment": payment.fragment,
            "unit_price": payment.unit_price, "load": payment.load, "amount": amount,
            "from_ms": payment.from_ms, "to_ms": payment.to_ms}


class Ledger:
    """One participant's ledger topic, written as it pays."""

    def __init__(self, kafka_config: dict[str, Any], registry: SchemaRegistryClient,
                 participant: str) -> None:
        ensure_topics(kafka_config, [LEDGER_TOPIC], partitions=1)
        self._producer = TupleProducer(kafka_config, registry, LEDGER_TOPIC,
                                       load_schema("ledger_entry"), f"bpm-{participant}",
                                       boundary_interval_s=3600.0)

    def pay(self, payment: Payment, amount: float) -> None:
        self._producer.produce(entry(payment, amount), payment.entry_id, payment.to_ms,
                               key=payment.contract)
        self._producer.flush()

    def close(self) -> None:
        self._producer.close()


def read_entries(kafka_configs: Iterable[dict[str, Any]], registry: SchemaRegistryClient,
                 idle_s: float = 2.0) -> list[dict[str, Any]]:
    """Every entry of every participant's ledger, each payment once (times in ms)."""
    seen: dict[str, dict[str, Any]] = {}
    for config in kafka_configs:
        ensure_topics(config, [LEDGER_TOPIC], partitions=1)
        with TupleConsumer(config, registry, [LEDGER_TOPIC],
                           f"medusa-ledger-{uuid.uuid4().hex[:8]}") as consumer:
            for consumed in consumer.drain(idle_s=idle_s, timeout_s=60):
                if consumed.record.value is not None:
                    value = dict(consumed.record.value)
                    value.update(from_ms=epoch_ms(value["from_ms"]),
                                 to_ms=epoch_ms(value["to_ms"]))
                    seen.setdefault(consumed.record.tuple_id, value)
    return sorted(seen.values(), key=lambda e: (e["to_ms"], e["contract"]))


@dataclass(frozen=True)
class Balances:
    participants: dict[str, float]
    """Received minus paid."""
    contracts: dict[str, float]
    """Paid under each contract."""


def balances(entries: Iterable[Mapping[str, Any]]) -> Balances:
    participants: dict[str, float] = defaultdict(float)
    contracts: dict[str, float] = defaultdict(float)
    for item in entries:
        amount = float(item["amount"])
        participants[str(item["origin"])] -= amount
        participants[str(item["host"])] += amount
        contracts[str(item["contract"])] += amount
    return Balances(dict(participants), dict(contracts))
