"""What an operator may do from the console, behind its participant's token: move or scale
a fragment, cut and heal the link between two participants, propose and accept a
contract.

Every catalog write an action makes carries the operator's own token, so the catalog's
authorization decides exactly as it would for the CLI (``medusa --as P move ...``): the
console grants nothing of its own. Actions take seconds to minutes (a move waits until
the fragment runs on its new node), so each runs in a thread and its outcome is kept in a
log that the live page shows.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from medusa import contracts
from medusa.catalog.client import CatalogClient
from medusa.catalog.model import PART, Kind
from medusa.credentials import ADMIN
from medusa.errors import MedusaError
from medusa.faults import Links, duration_ms

log = logging.getLogger("medusa.console")

MoveFragment = Callable[[CatalogClient, str, str], str]
"""(catalog acting as the operator, fragment, target node) -> what happened. Given by whoever
starts the service, as the catalog itself does not run Spark code (``medusa_spark.deploy``)."""
ScaleFragment = Callable[[CatalogClient, str, int], str]
"""(catalog acting as the operator, fragment, instances) -> what happened."""

KINDS = ("move", "scale", "partition", "heal", "propose", "accept")
KEPT = 50
"""Actions the log keeps, newest last."""


class ActionError(MedusaError, ValueError):
    """An action asked for with a missing or malformed field; the message names it."""


@dataclass
class Action:
    id: int
    kind: str
    principal: str
    summary: str
    status: str = "running"
    """running, done or failed."""
    outcome: str = ""
    started_ms: int = 0
    ended_ms: int | None = None


@dataclass(frozen=True)
class Runners:
    """How the actions that need code beyond the catalog's are carried out."""

    catalog_url: str
    toxiproxy_url: str | None = None
    move: MoveFragment | None = None
    scale: ScaleFragment | None = None


def _text(fields: Mapping[str, Any], name: str, pattern: str, example: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise ActionError(f"{name}: expected {example}, got {value!r}")
    return value


def _number(fields: Mapping[str, Any], name: str, low: float, high: float) -> float:
    value = fields.get(name)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not \
            low <= value <= high:
        raise ActionError(f"{name}: expected a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


PARTICIPANT = rf"{PART}"
NODE = rf"{PART}/{PART}"
FRAGMENT = rf"{PART}/{PART}/{PART}"
CONTRACT = rf"{PART}/{PART}"


class ActionLog:
    """Starts actions and keeps their outcomes (thread-safe)."""

    def __init__(self, runners: Runners) -> None:
        self.runners = runners
        self._actions: deque[Action] = deque(maxlen=KEPT)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def recent(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(action) for action in self._actions]

    def get(self, action_id: int) -> dict[str, Any] | None:
        with self._lock:
            found = [asdict(a) for a in self._actions if a.id == action_id]
        return found[0] if found else None

    def start(self, kind: str, fields: Mapping[str, Any], principal: str,
              token: str) -> dict[str, Any]:
        """Checks the request and starts it; ActionError (naming the field) when malformed."""
        summary, work = self._plan(kind, fields, principal, token)
        with self._lock:
            action = Action(next(self._ids), kind, principal, summary,
                            started_ms=int(time.time() * 1000))
            self._actions.append(action)
        log.info("console: %s starts action %d: %s", principal, action.id, summary)
        threading.Thread(target=self._run, args=(action, work), name=f"action-{action.id}",
                         daemon=True).start()
        return asdict(action)

    def _run(self, action: Action, work: Callable[[], str]) -> None:
        try:
            outcome, status = work(), "done"
        except Exception as error:  # the outcome the operator sees, whatever went wrong
            outcome, status = str(error) or type(error).__name__, "failed"
        with self._lock:
            action.status, action.outcome = status, outcome
            action.ended_ms = int(time.time() * 1000)
        log.info("console: action %d (%s) %s: %s", action.id, action.summary, status, outcome)

    def _plan(self, kind: str, fields: Mapping[str, Any], principal: str,
              token: str) -> tuple[str, Callable[[], str]]:
        """The action's summary and its work; ActionError (naming the field) when malformed."""
        plan = _PLANS.get(kind)
        if plan is None:
            raise ActionError(f"action: expected one of {', '.join(KINDS)}, got {kind!r}")
        return plan(_Request(kind, fields, principal, token, self.runners))


@dataclass(frozen=True)
class _Request:
    """An action as asked for: its kind and fields, by whom, with which token."""

    kind: str
    fields: Mapping[str, Any]
    principal: str
    token: str
    runners: Runners

    def catalog(self) -> CatalogClient:
        """The catalog, acting as the operator."""
        return CatalogClient(self.runners.catalog_url, token=self.token)


Plan = tuple[str, Callable[[], str]]
"""What an action will do (its summary), and the work that does it (returning the outcome)."""


def _plan_move(request: _Request) -> Plan:
    fields = request.fields
    fragment = _text(fields, "fragment", FRAGMENT, "participant/network/fragment")
    node = _text(fields, "node", NODE, "participant/node")
    move = request.runners.move
    if move is None:
        raise ActionError("move: this catalog was started without the move runner")

    def moved() -> str:
        with request.catalog() as client:
            return move(client, fragment, node)
    return f"move {fragment} to {node}", moved


def _plan_scale(request: _Request) -> Plan:
    fields = request.fields
    fragment = _text(fields, "fragment", FRAGMENT, "participant/network/fragment")
    count = int(_number(fields, "instances", 1, 64))
    scale = request.runners.scale
    if scale is None:
        raise ActionError("scale: this catalog was started without the scale runner")

    def scaled() -> str:
        with request.catalog() as client:
            return scale(client, fragment, count)
    return f"scale {fragment} to {count} instance(s)", scaled


def _plan_links(request: _Request) -> Plan:
    """``partition`` or ``heal`` the links between two participants."""
    kind, fields, principal = request.kind, request.fields, request.principal
    first = _text(fields, "first", PARTICIPANT, "a participant such as alpha")
    second = _text(fields, "second", PARTICIPANT, "another participant such as beta")
    if first == second:
        raise ActionError("second: expected a participant other than the first")
    if principal not in (first, second, ADMIN):
        raise ActionError(f"{kind}: {principal} may act only on its own links "
                          f"({first} and {second} are not it)")
    url = request.runners.toxiproxy_url
    if url is None:
        raise ActionError(f"{kind}: the federation has no links to cut (no toxiproxy)")

    def faulted() -> str:
        with Links(url) as links:
            if kind == "partition":
                cut = links.partition(first, second)
                return f"cut {', '.join(cut)}"
            healed = links.heal(first, second)
            return f"healed {', '.join(healed)}" if healed else "the links were up"
    verb = "cut the links between" if kind == "partition" else "heal the links between"
    return f"{verb} {first} and {second}", faulted


def _movable(fields: Mapping[str, Any], origin: str) -> list[str]:
    """The networks or fragments a proposed contract lets move (a list, or comma-separated)."""
    raw_movable = fields.get("movable")
    movable = ([m.strip() for m in raw_movable.split(",") if m.strip()]
               if isinstance(raw_movable, str) else raw_movable)
    if not isinstance(movable, list) or not movable or not all(
            isinstance(m, str) and re.fullmatch(rf"{PART}/{PART}(/{PART})?", m)
            for m in movable):
        raise ActionError(f"movable: expected networks or fragments such as "
                          f"{origin}/sensor-windows, got {raw_movable!r}")
    return movable


def _plan_propose(request: _Request) -> Plan:
    fields, principal = request.fields, request.principal
    origin = _text(fields, "origin", PARTICIPANT, "the participant whose load moves")
    host = _text(fields, "host", PARTICIPANT, "the participant that runs it")
    price = _number(fields, "price", 0, 1e12)
    delta = _number(fields, "delta", 0, 1e12) if fields.get("delta") not in (
        None, "") else 0.0
    period = fields.get("period") or "1h"
    if not isinstance(period, str):
        raise ActionError(f"period: expected a duration such as 1h, got {period!r}")
    period_s = duration_ms(period, "period") / 1000
    movable = _movable(fields, origin)

    def proposed() -> str:
        with request.catalog() as client:
            taken = {e.name for e in client.list(Kind.CONTRACTS)}
            name = next(f"{origin}-{host}-{n}" for n in itertools.count(1)
                        if f"{principal}/{origin}-{host}-{n}" not in taken)
            made = contracts.propose(client, name, origin=origin, host=host,
                                     price=price, delta=delta, movable=movable,
                                     period_s=period_s, by=principal)
        return f"proposed {made.name}; the other party accepts it"
    return (f"propose that {origin}'s {', '.join(movable)} may run on {host} at "
            f"{price - delta:g}..{price:g}"), proposed


def _plan_accept(request: _Request) -> Plan:
    name = _text(request.fields, "contract", CONTRACT, "proposer/name")

    def accepted() -> str:
        with request.catalog() as client:
            made = contracts.accept(client, name, by=request.principal)
        return f"{made.name} is active"
    return f"accept contract {name}", accepted


_PLANS: dict[str, Callable[[_Request], Plan]] = {
    "move": _plan_move, "scale": _plan_scale, "partition": _plan_links,
    "heal": _plan_links, "propose": _plan_propose, "accept": _plan_accept,
}
"""How each of ``KINDS`` is checked and carried out."""
