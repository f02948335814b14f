"""The console's HTTP side, under ``/console`` of the catalog service: the page and its
script, the live snapshot (server-sent events), one trace's timeline, and the actions.

Reads are open, like the catalog's. Actions need ``Authorization: Bearer <token>`` of a
participant (the page keeps the token the operator signs in with in the tab's session
storage only). None of these routes is in the catalog's OpenAPI description: they serve
the page, not API clients.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from medusa.console.actions import ActionError
from medusa.console.live import Console
from medusa.credentials import principal_of_token
from medusa.errors import MedusaError

STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
KEEPALIVE_S = 15.0


def _static(name: str) -> str:
    return resources.files("medusa.console").joinpath("static", name).read_text()


def _principal(request: Request, tokens: Mapping[str, str] | None) -> tuple[str, str]:
    """(principal, token) of the request's bearer token; 401 without a known one."""
    if tokens is None:
        raise HTTPException(403, "this catalog checks no tokens, so the console takes no "
                                 "actions (start the federation with credentials)")
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    found = (principal_of_token(tokens, presented)
             if scheme.lower() == "bearer" and presented else None)
    if found is None:
        raise HTTPException(401, "sign in with your participant's token",
                            headers={"WWW-Authenticate": "Bearer"})
    return found, presented


def mount_console(app: FastAPI, console: Console, tokens: Mapping[str, str] | None) -> None:
    router = APIRouter(prefix="/console", include_in_schema=False)

    @router.get("")
    @router.get("/")
    def page() -> HTMLResponse:
        return HTMLResponse(_static("console.html"))

    @router.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC:
            raise HTTPException(404, f"no {name}")
        # Served as the package has it, so a page open in a browser picks changes up.
        return Response(_static(name), media_type=STATIC[name],
                        headers={"Cache-Control": "no-cache"})

    @router.get("/snapshot")
    def snapshot() -> Response:
        return Response(console.latest()[1], media_type="application/json")

    @router.get("/events")
    async def events(request: Request) -> StreamingResponse:
        async def stream() -> AsyncIterator[str]:
            seen, quiet = -1, 0.0
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                sequence, payload = console.latest()
                if sequence != seen:
                    seen, quiet = sequence, 0.0
                    yield f"id: {sequence}\nevent: snapshot\ndata: {payload}\n\n"
                elif quiet >= KEEPALIVE_S:  # a comment keeps proxies from closing it
                    quiet = 0.0
                    yield ": keep-alive\n\n"
                await asyncio.sleep(0.25)
                quiet += 0.25
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

    @router.get("/traces/{trace_id}")
    def trace(trace_id: str) -> JSONResponse:
        if not trace_id.isalnum() or len(trace_id) > 64:
            raise HTTPException(422, f"trace_id: expected a hexadecimal trace id, got "
                                     f"{trace_id!r}")
        found = console.trace(trace_id)
        if found is None:
            raise HTTPException(404, f"Jaeger has no trace {trace_id}")
        if found.get("error"):
            raise HTTPException(502, f"Jaeger: {found['error']}")
        return JSONResponse(found)

    @router.post("/whoami")
    def whoami(request: Request) -> dict[str, str]:
        principal, _ = _principal(request, tokens)
        return {"principal": principal}

    @router.post("/actions/{kind}", status_code=202)
    async def act(kind: str, request: Request) -> JSONResponse:
        principal, token = _principal(request, tokens)
        try:
            fields: Any = json.loads(await request.body() or b"{}")
        except ValueError:
            raise HTTPException(422, "body: expected a JSON object") from None
        if not isinstance(fields, dict):
            raise HTTPException(422, "body: expected a JSON object")
        try:
            started = console.actions.start(kind, fields, principal, token)
        except (ActionError, MedusaError, ValueError) as error:
            raise HTTPException(422, str(error)) from None
        console.refresh()
        return JSONResponse(started, status_code=202)

    @router.get("/actions/{action_id}")
    def action(action_id: int) -> dict[str, Any]:
        found = console.actions.get(action_id)
        if found is None:
            raise HTTPException(404, f"no action {action_id}")
        return found

    app.include_router(router)
