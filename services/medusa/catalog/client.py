"""The catalog's HTTP client, for the CLI and the nodes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from opentelemetry.propagate import inject

from medusa import credentials
from medusa.catalog.model import Entry, Kind
from medusa.errors import MedusaError


class CatalogError(MedusaError, RuntimeError):
    """The catalog refused a request (the message is its reason) or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ConflictError(CatalogError):
    """409: someone else changed the entity since it was read."""


class CatalogForbiddenError(CatalogError):
    """401 or 403: the write needs a participant's token, or its principal may not make it."""


class CatalogClient:
    """``token``: the principal's catalog token, sent with every request; writes need one
    when the catalog checks tokens. Without one, this process's own token is sent (see
    ``medusa.credentials``), unless ``anonymous``."""

    def __init__(self, url: str, timeout_s: float = 30.0, token: str | None = None,
                 anonymous: bool = False) -> None:
        self.url = url.rstrip("/")
        if token is None and not anonymous:
            own = credentials.own_token()
            token = own[1] if own is not None else None
        # httpx shows an Authorization header as [secure] in its repr, never the token.
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, headers=headers)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CatalogClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers: dict[str, str] = {}
        inject(headers)  # the catalog's spans join the caller's trace, when there is one
        try:
            response = self._http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as error:
            raise CatalogError(f"catalog at {self.url} did not answer: {error}") from None
        if response.status_code >= 400 and response.status_code != 404:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            if not isinstance(detail, str):  # FastAPI's validation errors are a list
                detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}"
                                   for d in detail)
            error_type = {409: ConflictError, 401: CatalogForbiddenError,
                          403: CatalogForbiddenError}.get(response.status_code, CatalogError)
            raise error_type(f"catalog: {detail}", response.status_code)
        return response

    def healthy(self) -> bool:
        try:
            return self._http.get("/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def get(self, kind: Kind, name: str) -> Entry | None:
        response = self._request("GET", f"/v1/{kind.value}/{name}")
        return None if response.status_code == 404 else Entry.model_validate(response.json())

    def list(self, kind: Kind, **filters: str | None) -> list[Entry]:
        params = {k: v for k, v in filters.items() if v is not None}
        response = self._request("GET", f"/v1/{kind.value}", params=params)
        return [Entry.model_validate(raw) for raw in response.json()]

    def put(self, kind: Kind, name: str, spec: dict[str, Any],
            version: int | None = None) -> Entry:
        response = self._request("PUT", f"/v1/{kind.value}/{name}",
                                 json={"spec": spec, "version": version})
        if response.status_code == 404:
            raise ConflictError(f"catalog: {kind.singular} {name} is gone", 404)
        return Entry.model_validate(response.json())

    def delete(self, kind: Kind, name: str, version: int | None = None) -> Entry | None:
        params = {"version": version} if version is not None else {}
        response = self._request("DELETE", f"/v1/{kind.value}/{name}", params=params)
        return None if response.status_code == 404 else Entry.model_validate(response.json())

    def update(self, kind: Kind, name: str,
               change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
               attempts: int = 20) -> Entry | None:
        """Read, change, write; read again on a conflict. ``change`` returning None skips."""
        for _ in range(attempts):
            current = self.get(kind, name)
            spec = change(dict(current.spec) if current else None)
            if spec is None:
                return current
            try:
                return self.put(kind, name, spec, current.version if current else None)
            except ConflictError:
                time.sleep(0.05)
        raise ConflictError(f"catalog: {kind.singular} {name} kept changing under "
                            f"{attempts} attempts to update it")

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if time.monotonic() > deadline:
                raise CatalogError(f"catalog at {self.url} did not answer within {timeout_s:.0f}s")
            time.sleep(0.3)
