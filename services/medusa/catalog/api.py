"""The catalog's HTTP JSON API; FastAPI serves its OpenAPI description at /openapi.json.

Writes are versioned: a create sends no version, an update sends the version it
read, and a stale one gets 409 instead of overwriting someone else's change.

Writes (PUT, DELETE) are authenticated, when the service is given tokens: each carries
``Authorization: Bearer <token>`` of a principal, and ``authorization`` says what that
principal may change (401 without a known token, 403 beyond its rights). Reads stay open.
"""

# No ``from __future__ import annotations``: FastAPI reads the handlers' annotations at
# run time, and the PUT bodies are types made per kind inside a function.
import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from opentelemetry.context import attach, detach
from opentelemetry.propagate import extract
from pydantic import BaseModel, Field, ValidationError, create_model

from medusa.catalog.authorization import refusal
from medusa.catalog.model import (
    PART,
    SPECS,
    ContractSpec,
    Entry,
    FragmentSpec,
    Kind,
    NetworkSpec,
    NodeSpec,
    OfferSpec,
    Spec,
    StreamSpec,
)
from medusa.catalog.store import CatalogStore, CatalogUnavailableError, VersionConflictError
from medusa.credentials import principal_of_token

log = logging.getLogger("medusa.catalog")

Segment = Annotated[str, Path(pattern=rf"^{PART}$", max_length=63)]

NetworkCheck = Callable[[str], None]
"""Checks a network definition (its YAML) before the catalog stores it; raises ValueError
saying what is wrong. Given by whoever starts the service (``medusa catalog serve`` passes
the Spark side's structural check), so the catalog itself knows no box types."""

DEFAULT_NETWORK_PARTICIPANT = "alpha"
"""The participant of a network definition that names none (as ``medusa_spark`` reads it)."""


class Problem(BaseModel):
    detail: str


class Health(BaseModel):
    status: str
    entries: int
    revision: int


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "No such entity"},
    409: {"model": Problem, "description": "Version conflict: read again and retry"},
    422: {"description": "Malformed request, or it names something that does not exist"},
    503: {"model": Problem, "description": "The catalog cannot reach its Kafka topic"},
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    401: {"model": Problem, "description": "No participant's token, or an unknown one"},
    403: {"model": Problem, "description": "The token's principal may not change this entity"},
}

UNAUTHENTICATED = "catalog writes need a participant's token (Authorization: Bearer ...)"

_bearer = HTTPBearer(auto_error=False, description="A participant's catalog token "
                                                   "(see ``medusa.credentials``)")


class Authenticator:
    """Who makes a write, from its bearer token: a FastAPI dependency of the writes.

    ``tokens`` maps each token to its principal; None turns authentication off (an
    unsecured stack), and every write is then made by nobody in particular (None).
    """

    def __init__(self, tokens: Mapping[str, str] | None) -> None:
        self._tokens = None if tokens is None else dict(tokens)

    def __call__(self, request: Request, credentials: Annotated[
            HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str | None:
        if self._tokens is None:
            return None
        principal = None if credentials is None else principal_of_token(
            self._tokens, credentials.credentials)
        if principal is None:
            # The token itself is never logged: a mistyped one may be close to a real one.
            log.warning("catalog: refused %s %s from an unknown principal (%s token)",
                        request.method, request.url.path,
                        "no" if credentials is None else "an unknown")
            raise HTTPException(401, UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"})
        return principal



def _put_body(spec: type[Spec]) -> type[BaseModel]:
    """The body of a PUT for one kind: the spec, and the version read (absent to create)."""
    fields: dict[str, Any] = {
        "spec": (spec, ...),
        "version": (int | None, Field(None, ge=1, le=2**62,
                                      description="The version read; leave out to create")),
    }
    model: type[BaseModel] = create_model(f"Put{spec.__name__.removesuffix('Spec')}",
                                          __config__={"extra": "forbid"}, **fields)
    return model


class References:
    """Checks that what a write names exists: a stale or misspelt name is a 422, not data."""

    def __init__(self, store: CatalogStore, check_network: NetworkCheck | None = None) -> None:
        self.store = store
        self.check_network = check_network

    def require(self, kind: Kind, name: str, field: str) -> Entry:
        entry = self.store.get(kind, name)
        if entry is None:
            raise HTTPException(422, f"{field}: there is no {kind.singular} {name!r} "
                                     "in the catalog")
        return entry

    def check(self, kind: Kind, name: str, spec: Spec) -> None:
        participant = name.split("/", 1)[0]
        if kind is not Kind.PARTICIPANTS:
            self.require(Kind.PARTICIPANTS, participant, "participant")
        if isinstance(spec, NodeSpec) and spec.secondary == name:
            raise HTTPException(422, f"secondary: node {name} cannot be its own secondary")
        if isinstance(spec, StreamSpec) and spec.network is not None:
            self.require(Kind.NETWORKS, spec.network, "network")
        if isinstance(spec, NetworkSpec):
            self._check_network(name, spec)
        if isinstance(spec, FragmentSpec):
            self._check_fragment(name, spec)
        if isinstance(spec, ContractSpec):
            if participant != spec.proposed_by:
                raise HTTPException(422, f"proposed_by: the contract is filed under "
                                         f"{participant!r}, who must have proposed it")
            for field, party in (("origin", spec.origin), ("host", spec.host)):
                self.require(Kind.PARTICIPANTS, party, field)
        if isinstance(spec, OfferSpec):
            if participant != spec.origin:
                raise HTTPException(422, f"origin: the offer is filed under {participant!r}, "
                                         "who must be its origin")
            self.require(Kind.PARTICIPANTS, spec.host, "host")
            self.require(Kind.CONTRACTS, spec.contract, "contract")

    def _check_network(self, name: str, spec: NetworkSpec) -> None:
        try:
            if self.check_network is not None:
                # types need Spark: `medusa deploy` checks them first
                self.check_network(spec.definition)
            outline = _outline(spec.definition)
        except ValueError as error:
            raise HTTPException(422, f"definition: {error}") from None
        participant, _, network_name = name.partition("/")
        if outline.name != network_name or outline.participant != participant:
            raise HTTPException(422, f"definition: the YAML names network "
                                     f"{outline.participant}/{outline.name}, not {name}")

    def _check_fragment(self, name: str, spec: FragmentSpec) -> None:
        participant, network_name, _ = name.split("/")
        if spec.network != f"{participant}/{network_name}":
            raise HTTPException(422, f"network: fragment {name} belongs to network "
                                     f"{participant}/{network_name}, not {spec.network}")
        network = self.require(Kind.NETWORKS, spec.network, "network")
        known = _outline(network.spec["definition"]).boxes
        for box in spec.boxes:
            if box not in known:
                raise HTTPException(422, f"boxes: network {spec.network} has no box {box!r}")
        if len(set(spec.boxes)) != len(spec.boxes):
            twice = sorted({b for b in spec.boxes if spec.boxes.count(b) > 1})
            raise HTTPException(422, f"boxes: box {twice[0]!r} is named twice in "
                                     f"fragment {name}")
        self.require(Kind.NODES, spec.node, "node")
        if spec.replica is not None:
            self.require(Kind.NODES, spec.replica, "replica")
            if spec.replica == spec.node:
                raise HTTPException(422, f"replica: fragment {name} cannot have its replica "
                                         f"on its own node {spec.node}")


class _Outline(BaseModel):
    """What the catalog itself reads of a network definition: its name and its boxes."""

    name: str
    participant: str = DEFAULT_NETWORK_PARTICIPANT
    boxes: dict[str, Any] = Field(default_factory=dict)


def _outline(definition: str) -> _Outline:
    """The network's name, participant and box names; ValueError if the YAML has none."""
    try:
        raw = yaml.safe_load(definition)
    except yaml.YAMLError as error:
        raise ValueError(f"not valid YAML: {error}") from None
    if not isinstance(raw, dict):
        raise ValueError("expected a mapping with streams, boxes and arrows")
    try:
        outline: _Outline = _Outline.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"field {where!r}: {first['msg']}") from None
    return outline


def create_app(store: CatalogStore, check_network: NetworkCheck | None = None,
               tokens: Mapping[str, str] | None = None) -> FastAPI:
    """The API over ``store``; ``check_network`` vets network definitions (None: only their
    name and participant are checked); ``tokens`` maps each write token to its principal
    (None: writes are not authenticated)."""
    app = FastAPI(title="Medusa catalog", version="1",
                  description="Participants, nodes, streams, query networks, fragment placement "
                              "and contracts of a Medusa federation.")
    references = References(store, check_network)
    authenticate = Authenticator(tokens)

    @app.middleware("http")
    async def _continue_trace(request: Request, call_next: Any) -> Any:
        # A write made on behalf of a traced operation (a takeover) becomes part of it.
        token = attach(extract(dict(request.headers)))
        try:
            return await call_next(request)
        finally:
            detach(token)

    @app.exception_handler(VersionConflictError)
    def _conflict(_: Request, error: VersionConflictError) -> JSONResponse:
        status = 404 if error.actual is None and error.expected is not None else 409
        return JSONResponse({"detail": str(error)}, status_code=status)

    @app.exception_handler(CatalogUnavailableError)
    def _unavailable(_: Request, error: CatalogUnavailableError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=503)

    @app.get("/health", response_model=Health, tags=["service"])
    def health() -> Health:
        return Health(status="ok", entries=store.size, revision=store.revision)

    for kind in Kind:
        app.include_router(resource_router(Resource(store, references, kind), authenticate))
    return app


def _segments(kind: Kind) -> list[str]:
    """The path parameters that name an entry of ``kind``, in order."""
    if kind is Kind.FRAGMENTS:
        return ["participant", "network", "fragment"]
    return ["participant", "name"][:kind.segments]


class Resource:
    """One kind of catalog entry (participants, nodes, streams, networks, fragments,
    contracts, offers): what its routes do, apart from how FastAPI reads their requests."""

    def __init__(self, store: CatalogStore, references: References, kind: Kind) -> None:
        self.store = store
        self.references = references
        self.kind = kind
        self.segments = _segments(kind)
        self.path = f"/v1/{kind.value}/" + "/".join(f"{{{s}}}" for s in self.segments)

    def name_of(self, parts: dict[str, str]) -> str:
        return "/".join(parts[s] for s in self.segments)

    def entries(self, participant: str | None, node: str | None,
                network: str | None) -> list[Entry]:
        entries = self.store.entries(self.kind, f"{participant}/" if participant else "")
        if node is not None:
            entries = [e for e in entries if e.spec.get("node") == node]
        if network is not None:
            entries = [e for e in entries if e.spec.get("network") == network]
        return entries

    def get(self, **parts: str) -> Entry:
        entry = self.store.get(self.kind, self.name_of(parts))
        if entry is None:
            raise HTTPException(404, f"no {self.kind.singular} {self.name_of(parts)}")
        return entry

    def authorize(self, principal: str | None, method: str, name: str, current: Entry | None,
                  new: dict[str, Any] | None) -> None:
        if principal is None:
            return
        reason = refusal(principal, self.kind, name, None if current is None else current.spec,
                         new)
        if reason is not None:
            log.warning("catalog: refused %s %s %s to %s: %s", method, self.kind.singular, name,
                        principal, reason)
            raise HTTPException(403, reason)

    def put(self, body: Any, principal: str | None, **parts: str) -> Entry:
        name = self.name_of(parts)
        spec = body.spec.model_dump(mode="json")
        current = self.store.get(self.kind, name)
        self.authorize(principal, "PUT", name, current, spec)
        self.references.check(self.kind, name, body.spec)
        if (current.version if current else None) != body.version:
            # As the store would; checked here too so that the write replaces the very
            # version it was authorized against, not one written since.
            raise VersionConflictError(self.kind, name, body.version,
                                       current.version if current else None)
        return self.store.put(self.kind, name, spec, body.version)

    def delete(self, version: int | None, principal: str | None, **parts: str) -> Entry:
        name = self.name_of(parts)
        current = self.store.get(self.kind, name)
        self.authorize(principal, "DELETE", name, current, None)
        if version is None and principal is not None and current is not None:
            version = current.version  # removes only what the principal may remove
        return self.store.delete(self.kind, name, version)


def resource_router(resource: Resource, authenticate: Authenticator) -> APIRouter:
    """The routes of one kind of entry: list it, and read, write and remove one."""
    kind = resource.kind
    singular = kind.singular
    tags: list[str | Any] = [kind.value]
    router = APIRouter()
    router.get(f"/v1/{kind.value}", response_model=list[Entry], tags=tags,
               operation_id=f"list_{kind.value}", summary=f"List {kind.value}",
               )(_list_handler(resource))
    get_handler, put_handler, delete_handler = _item_handlers(resource, authenticate)
    router.get(resource.path, response_model=Entry, responses=ERRORS, tags=tags,
               operation_id=f"get_{singular}", summary=f"Read a {singular}")(get_handler)
    router.put(resource.path, response_model=Entry, responses=WRITE_ERRORS, tags=tags,
               operation_id=f"put_{singular}",
               summary=f"Create a {singular} (no version) or update it (the version read)",
               )(put_handler)
    router.delete(resource.path, response_model=Entry, responses=WRITE_ERRORS, tags=tags,
                  operation_id=f"delete_{singular}",
                  summary=f"Remove a {singular} (only at ``version`` when given)",
                  )(delete_handler)
    return router


def _list_handler(resource: Resource) -> Callable[..., list[Entry]]:
    def list_entries(
        participant: Annotated[str | None, Query(pattern=rf"^{PART}$")] = None,
        node: Annotated[str | None, Query(pattern=rf"^{PART}/{PART}$",
                                          description="Fragments placed on this node")] = None,
        network: Annotated[str | None, Query(pattern=rf"^{PART}/{PART}$",
                                             description="Fragments of this network")] = None,
    ) -> list[Entry]:
        return resource.entries(participant, node, network)
    return list_entries


Handlers = tuple[Callable[..., Entry], Callable[..., Entry], Callable[..., Entry]]
"""An entry's GET, PUT and DELETE handlers."""


def _item_handlers(resource: Resource, authenticate: Authenticator) -> Handlers:
    """FastAPI reads the path parameters from the signature, so each arity gets its own."""
    body_type = _put_body(SPECS[resource.kind])
    principal = Annotated[str | None, Depends(authenticate)]  # None: authentication is off
    arity = len(resource.segments)
    if arity == 1:
        return _participant_handlers(resource, body_type, principal)
    if arity == 2:
        return _named_handlers(resource, body_type, principal)
    return _fragment_handlers(resource, body_type, principal)


def _participant_handlers(resource: Resource, body_type: type[BaseModel],
                          Principal: Any) -> Handlers:
    """Handlers of ``/v1/{kind}/{participant}``."""
    def get1(participant: Segment) -> Entry:
        return resource.get(participant=participant)

    def put1(participant: Segment, body: Annotated[body_type, Body()],  # type: ignore[valid-type]
             principal: Principal) -> Entry:
        return resource.put(body, principal, participant=participant)

    def delete1(participant: Segment, principal: Principal, version: Annotated[
            int | None, Query(ge=1, le=2**62)] = None) -> Entry:
        return resource.delete(version, principal, participant=participant)
    return get1, put1, delete1


def _named_handlers(resource: Resource, body_type: type[BaseModel],
                    Principal: Any) -> Handlers:
    """Handlers of ``/v1/{kind}/{participant}/{name}``."""
    def get2(participant: Segment, name: Segment) -> Entry:
        return resource.get(participant=participant, name=name)

    def put2(participant: Segment, name: Segment,
             body: Annotated[body_type, Body()],  # type: ignore[valid-type]
             principal: Principal) -> Entry:
        return resource.put(body, principal, participant=participant, name=name)

    def delete2(participant: Segment, name: Segment, principal: Principal,
                version: Annotated[int | None, Query(ge=1, le=2**62)] = None) -> Entry:
        return resource.delete(version, principal, participant=participant, name=name)
    return get2, put2, delete2


def _fragment_handlers(resource: Resource, body_type: type[BaseModel],
                       Principal: Any) -> Handlers:
    """Handlers of ``/v1/fragments/{participant}/{network}/{fragment}``."""
    def get3(participant: Segment, network: Segment, fragment: Segment) -> Entry:
        return resource.get(participant=participant, network=network, fragment=fragment)

    def put3(participant: Segment, network: Segment, fragment: Segment,
             body: Annotated[body_type, Body()],  # type: ignore[valid-type]
             principal: Principal) -> Entry:
        return resource.put(body, principal, participant=participant, network=network,
                            fragment=fragment)

    def delete3(participant: Segment, network: Segment, fragment: Segment,
                principal: Principal,
                version: Annotated[int | None, Query(ge=1, le=2**62)] = None) -> Entry:
        return resource.delete(version, principal, participant=participant, network=network,
                               fragment=fragment)
    return get3, put3, delete3
