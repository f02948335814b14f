"""`medusa bpm`: one participant's load-management agent (BPM).

Each step it reads the nodes' newest load reports and the catalog, then does at most one
thing, in this order:
1. as a host, answers the open offers made to it (``medusa.bpm.policy.decide``): accepted
   offers name the least loaded of its nodes that are up;
2. as an origin with an offer in flight, moves the fragment of an accepted offer to the
   node named (``done``), or withdraws an offer left unanswered too long; nothing else
   happens while one is in flight or a fragment of its own is moving;
3. brings a fragment of its own home from a partner when its contract is over, or home
   is cheaper (``should_return``);
4. offers the fragment whose marginal cost most exceeds its price (``choose_offer``).
Offers are catalog entries (kind ``offers``), filed under the origin.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from opentelemetry import trace

from medusa.bpm.ledger import Ledger, Payment, hosting_amount
from medusa.bpm.policy import Offer, choose_offer, decide, should_return
from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Entry, Kind, OfferSpec
from medusa.contracts import Contract, contracts, now_ms
from medusa.load import ParticipantLoad, participant_loads
from medusa.schemas import epoch_ms
from medusa.trace_view import MOVE_ROOT
from medusa.tracing import context_of, traceparent

log = logging.getLogger("medusa.bpm")

Reports = Callable[[], Mapping[str, Mapping[str, Any]]]
Mover = Callable[[CatalogClient, str, str, str | None, str | None], object]
"""(catalog, fragment, node, traceparent the new node's hand-over continues, contract it
moves under: None when it comes home)."""


def _move(catalog: CatalogClient, fragment: str, node: str, parent: str | None,
          contract: str | None) -> object:
    from medusa_spark.deploy import move

    return move(catalog, fragment, node, report=lambda line: log.info("%s", line.strip()),
                trace_parent=parent, contract=contract)


class BpmAgent:
    def __init__(self, participant: str, catalog: CatalogClient, reports: Reports,
                 offer_timeout_s: float = 60.0, offer_backoff_s: float = 60.0,
                 move: Mover = _move, ledger: Ledger | None = None,
                 report_max_age_s: float = 30.0,
                 paid: Iterable[Mapping[str, Any]] = ()) -> None:
        """``ledger``: where it pays (None: it pays nothing); ``paid``: the ledger's entries
        so far, so that a restarted agent pays each stretch of hosting once."""
        self.participant = participant
        self.catalog = catalog
        self.reports = reports
        self.offer_timeout_ms = int(offer_timeout_s * 1000)
        self.offer_backoff_ms = int(offer_backoff_s * 1000)
        self.report_max_age_ms = int(report_max_age_s * 1000)
        self.ledger = ledger
        self.paid_until: dict[tuple[str, str], int] = {}
        """(contract, fragment) -> until when its hosting is paid."""
        for item in paid:
            if item["origin"] == participant:
                key = (str(item["contract"]), str(item["fragment"]))
                self.paid_until[key] = max(self.paid_until.get(key, 0),
                                            epoch_ms(item["to_ms"]))
        self.move = move
        self.tracer = trace.get_tracer("medusa.bpm")

    def step(self, at_ms: int | None = None) -> str | None:
        """Does at most one thing; says what (None: nothing to do)."""
        now = now_ms() if at_ms is None else at_ms
        nodes = self.catalog.list(Kind.NODES)
        up = {n.name for n in nodes if n.spec.get("status", "up") == "up"}
        # A node that stopped reporting (stopped, or cut off) counts for nothing.
        reports = {name: r for name, r in self.reports().items()
                   if now - epoch_ms(r.get("reported_at", now)) <= self.report_max_age_ms}
        loads = participant_loads(r for name, r in reports.items() if name in up)
        me = loads.get(self.participant) or ParticipantLoad(self.participant, 0.0, 0.0, {})
        fragments = self.catalog.list(Kind.FRAGMENTS)
        known = {c.name: c for c in contracts(self.catalog)}
        offers = self._offers()
        for entry, offer in offers:
            if offer.host == self.participant and offer.status == "open":
                return self._answer(entry, offer, me, known.get(offer.contract), nodes,
                                    reports, now)
        for entry, offer in offers:
            if offer.origin == self.participant and offer.status in ("open", "accepted"):
                return self._follow(entry, offer, now, at_ms)
        mine = [f for f in fragments if f.name.startswith(f"{self.participant}/")]
        if any(f.spec.get("phase") in ("moving", "released") for f in mine):
            return None  # one move at a time
        # At a partner because the agent moved it there under a contract: load that its
        # network (or an operator) placed at a partner stays where it was placed.
        away = [f for f in mine if not str(f.spec.get("node")).startswith(
            f"{self.participant}/") and f.spec.get("phase") == "running"
            and self._terms(f, offers) is not None]
        for fragment in away:
            self._pay_periods(fragment, offers, known, now)
        for fragment in away:
            returned = self._maybe_return(fragment, me, loads, known, offers, nodes, reports,
                                          now)
            if returned:
                return returned
        hosted_here = [f.name for f in mine if f.spec.get("phase") == "running"
                       and str(f.spec.get("node")).startswith(f"{self.participant}/")]
        # A refused or unanswered offer is not made again before the backoff has passed.
        recent = {(o.fragment, o.host) for _, o in offers if o.origin == self.participant
                  and o.status in ("refused", "withdrawn")
                  and now - (o.decided_at or o.made_at) < self.offer_backoff_ms}
        chosen = choose_offer(me, hosted_here, known.values(), now, recent)
        return self._offer(chosen, now) if chosen is not None else None

    def _offers(self) -> list[tuple[Entry, OfferSpec]]:
        return [(e, OfferSpec.model_validate(e.spec)) for e in self.catalog.list(Kind.OFFERS)]

    def _answer(self, entry: Entry, offer: OfferSpec, me: ParticipantLoad,
                contract: Contract | None, nodes: list[Entry],
                reports: Mapping[str, Mapping[str, Any]], now: int) -> str:
        decision = decide(me, Offer(offer.fragment, offer.origin, offer.host, offer.contract,
                                    offer.unit_price, offer.load), contract, now)
        node = _least_loaded(self.participant, nodes, reports) if decision.accepted else None
        accepted = decision.accepted and node is not None
        reason = decision.reason if node is not None or not decision.accepted else \
            f"{self.participant} has no node up to take it"
        spec = {**entry.spec, "status": "accepted" if accepted else "refused",
                "reason": reason, "node": node, "decided_at": now}
        self.catalog.put(Kind.OFFERS, entry.name, spec, entry.version)
        self.tracer.start_span("accept" if accepted else "refuse",
                               context=context_of(offer.trace), attributes={
                                   "medusa.bpm.host": self.participant, "medusa.node": node or "",
                                   "medusa.bpm.reason": reason}).end()
        verdict = f"accepted, on {node}" if accepted else "refused"
        log.info("offer %s of %s: %s (%s)", entry.name, offer.fragment, verdict, reason)
        return f"{verdict} offer {entry.name}: {reason}"

    def _follow(self, entry: Entry, offer: OfferSpec, now: int, at_ms: int | None
                ) -> str | None:
        if offer.status == "open":
            if now - offer.made_at < self.offer_timeout_ms:
                return None
            self.catalog.put(Kind.OFFERS, entry.name, {
                **entry.spec, "status": "withdrawn", "reason": "no answer in time",
                "decided_at": now}, entry.version)
            log.info("withdrew offer %s of %s: no answer in time", entry.name, offer.fragment)
            return f"withdrew offer {entry.name}: no answer in time"
        assert offer.node is not None
        current = self.catalog.get(Kind.FRAGMENTS, offer.fragment)
        if current is None:
            self.catalog.put(Kind.OFFERS, entry.name, {
                **entry.spec, "status": "withdrawn", "reason": "the fragment is gone"},
                entry.version)
            return f"withdrew offer {entry.name}: {offer.fragment} is gone"
        if current.spec.get("node") != offer.node:  # else moved before a restart
            log.info("moving %s to %s under %s at %g a unit", offer.fragment, offer.node,
                     offer.contract, offer.unit_price)
            with self.tracer.start_as_current_span(
                    "hand-over", context=context_of(offer.trace),
                    attributes={"medusa.fragment": offer.fragment,
                                "medusa.node": offer.node}) as span:
                self.move(self.catalog, offer.fragment, offer.node, traceparent(span),
                          offer.contract)
        moved = now_ms() if at_ms is None else at_ms
        self.catalog.update(Kind.OFFERS, entry.name, lambda spec: None if spec is None else {
            **spec, "status": "done", "decided_at": spec.get("decided_at") or moved})
        payment = Payment("move", offer.contract, offer.origin, offer.host, offer.fragment,
                          offer.unit_price, offer.load, moved, moved)
        self._pay(payment, offer.unit_price * offer.load)
        self.paid_until[(offer.contract, offer.fragment)] = moved
        return f"moved {offer.fragment} to {offer.node} under {offer.contract}"

    def _pay(self, payment: Payment, amount: float) -> None:
        if self.ledger is not None:
            self.ledger.pay(payment, amount)
        log.info("paid %s %.4f for %s of %s under %s", payment.host, amount, payment.kind,
                 payment.fragment, payment.contract)

    def _terms(self, fragment: Entry, offers: list[tuple[Entry, OfferSpec]]
               ) -> OfferSpec | None:
        """The accepted offer under which a fragment of mine runs where it runs now."""
        host = str(fragment.spec["node"]).split("/", 1)[0]
        done = [o for _, o in offers if o.fragment == fragment.name and o.host == host
                and o.status == "done"]
        return max(done, key=lambda o: o.made_at, default=None)

    def _pay_periods(self, fragment: Entry, offers: list[tuple[Entry, OfferSpec]],
                     known: Mapping[str, Contract], now: int, until_now: bool = False) -> None:
        """Pays each period of hosting that has ended (and, ``until_now``, the stretch
        since)."""
        terms = self._terms(fragment, offers)
        contract = known.get(terms.contract) if terms is not None else None
        if terms is None or contract is None or contract.spec.accepted_at is None:
            return
        key = (terms.contract, fragment.name)
        start = self.paid_until.get(key, terms.decided_at or terms.made_at)
        while True:
            end = contract.period_end(start)
            if contract.spec.ends_at is not None:
                end = min(end, contract.spec.ends_at)
            if end > now:
                end = now if until_now else start
            if end <= start:
                return
            payment = Payment("hosting", terms.contract, terms.origin, terms.host,
                              fragment.name, terms.unit_price, terms.load, start, end)
            self._pay(payment, hosting_amount(terms.unit_price, terms.load, start, end,
                                              contract.spec.period_s))
            self.paid_until[key] = start = end

    def _maybe_return(self, fragment: Entry, me: ParticipantLoad,
                      loads: Mapping[str, ParticipantLoad], known: Mapping[str, Contract],
                      offers: list[tuple[Entry, OfferSpec]],
                      nodes: list[Entry], reports: Mapping[str, Mapping[str, Any]],
                      now: int) -> str | None:
        host = str(fragment.spec["node"]).split("/", 1)[0]
        load = loads[host].fragments.get(fragment.name, 0.0) if host in loads else 0.0
        under = [c for c in known.values() if c.spec.origin == self.participant
                 and c.spec.host == host and c.covers(fragment.name) and c.in_force(now)]
        # Known only once the host's report lists it, after a window and a half there: a
        # report from before it arrived says nothing of it (not that it is idle).
        settled = host in loads and fragment.name in loads[host].fragments \
            and fragment.name not in loads[host].unsettled
        terms = self._terms(fragment, offers)
        paid = terms.unit_price * terms.load if terms is not None else None
        why = should_return(me, fragment.name, load, under[0] if under else None, now, settled,
                            paid)
        if why is None:
            return None
        home = _least_loaded(self.participant, nodes, reports)
        if home is None:
            return None
        log.info("bringing %s home from %s to %s: %s", fragment.name, host, home, why)
        with self.tracer.start_as_current_span(f"{MOVE_ROOT}{fragment.name}", attributes={
                "medusa.fragment": fragment.name, "medusa.bpm.origin": self.participant,
                "medusa.bpm.reason": why, "medusa.node": home}) as span:
            self.move(self.catalog, fragment.name, home, traceparent(span), None)
        self._pay_periods(fragment, offers, known, now, until_now=True)
        return f"brought {fragment.name} home to {home}: {why}"

    def _offer(self, offer: Offer, now: int) -> str:
        name = f"{self.participant}/offer-{uuid.uuid4().hex[:8]}"
        # The move's trace: its root is the offer; the answer and the hand-over join it.
        root = self.tracer.start_span(f"{MOVE_ROOT}{offer.fragment}", attributes={
            "medusa.fragment": offer.fragment, "medusa.bpm.origin": offer.origin,
            "medusa.bpm.host": offer.host, "medusa.bpm.contract": offer.contract,
            "medusa.bpm.unit_price": offer.unit_price, "medusa.bpm.load": offer.load,
            "medusa.bpm.offer": name})
        self.tracer.start_span("offer", context=trace.set_span_in_context(root)).end()
        root.end()
        spec = OfferSpec(fragment=offer.fragment, origin=offer.origin, host=offer.host,
                         contract=offer.contract, unit_price=offer.unit_price,
                         load=round(offer.load, 6), made_at=now, trace=traceparent(root))
        self.catalog.put(Kind.OFFERS, name, spec.model_dump(mode="json"))
        log.info("offered %s (load %.3f) to %s under %s at %g a unit", offer.fragment,
                 offer.load, offer.host, offer.contract, offer.unit_price)
        return f"offered {offer.fragment} to {offer.host} under {offer.contract}"

    def run(self, interval_s: float, stop: Callable[[], bool],
            alive_file: Path | None = None) -> None:
        while not stop():
            try:
                self.step()  # each action logs itself
            except Exception as error:  # the catalog or Kafka away: retried next step
                log.warning("bpm %s: %s; retrying", self.participant, error)
            else:
                if alive_file is not None:
                    alive_file.touch()
            time.sleep(interval_s)


def _least_loaded(participant: str, nodes: list[Entry],
                  reports: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The participant's node that is up with the most capacity left (reported nodes first)."""
    candidates = [n.name for n in nodes if n.participant == participant
                  and n.spec.get("status", "up") == "up"]

    def spare(name: str) -> tuple[bool, float, str]:
        report = reports.get(name)
        if report is None or not report.get("capacity"):
            return (False, 0.0, name)
        return (True, float(report["capacity"]) - float(report.get("load") or 0.0), name)

    return max(candidates, key=spare, default=None)
