"""The schema registry's front door: reads are open, writes need a participant's token.

Apicurio's own authentication needs an OpenID Connect server; the federation already has
a token per participant (``medusa.credentials``), so this gateway checks it and forwards
the request to the registry, which listens on a port of its own. A write is accepted with
``Authorization: Basic base64(principal:token)`` (what Schema Registry clients send) or
``Authorization: Bearer <token>``; anything else gets 401, and the refusal is logged
without the token.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from medusa.credentials import principal_of_token

log = logging.getLogger("medusa.registry_gateway")

READS = frozenset({"GET", "HEAD", "OPTIONS"})

# Hop-by-hop headers, and those httpx sets itself.
_DROPPED = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "te",
                      "upgrade", "proxy-authorization", "authorization", "content-length"})


def principal_of(authorization: str | None, tokens: Mapping[str, str]) -> str | None:
    """Whose token the header carries, or None."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return principal_of_token(tokens, value)
    if scheme.lower() == "basic":
        try:
            user, _, token = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        principal = principal_of_token(tokens, token)
        return principal if principal == user else None
    return None


def create_app(upstream: str, tokens: Mapping[str, str], timeout_s: float = 30.0) -> Starlette:
    """The gateway in front of the registry at ``upstream`` (``http://127.0.0.1:port``)."""
    client = httpx.AsyncClient(base_url=upstream, timeout=timeout_s)

    async def forward(request: Request) -> Response:
        if request.method not in READS:
            principal = principal_of(request.headers.get("authorization"), tokens)
            if principal is None:
                log.warning("registry: refused %s %s: no valid participant token",
                            request.method, request.url.path)
                return JSONResponse(
                    {"error_code": 40101,
                     "message": "registry writes need a participant's token "
                                "(HTTP Basic principal:token, or Bearer)"}, status_code=401)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        try:
            answer = await client.request(request.method, request.url.path,
                                          params=request.query_params, headers=headers,
                                          content=await request.body())
        except httpx.HTTPError as error:
            return JSONResponse({"error_code": 50301,
                                 "message": f"the schema registry does not answer: {error}"},
                                status_code=503)
        kept = {k: v for k, v in answer.headers.items()
                if k.lower() not in _DROPPED and k.lower() != "content-encoding"}
        return Response(answer.content, status_code=answer.status_code, headers=kept)

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    methods = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH"]
    return Starlette(routes=[Route("/gateway/health", health),
                             Route("/{path:path}", forward, methods=methods)],
                     lifespan=lifespan)


def serve(upstream: str, tokens: Mapping[str, str], host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(upstream, tokens), host=host, port=port, log_level="warning")
