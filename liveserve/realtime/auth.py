"""API keys: what a WebSocket upgrade or a /metrics request must carry when `server.api_keys` is set."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from fastapi.responses import JSONResponse

SUBPROTOCOL_PREFIX = "openai-insecure-api-key."  # how browsers, which cannot set headers, send the key


class ApiKeys:
    """The keys a request may present: `Authorization: Bearer <key>` (what the SDKs send) or, on a
    WebSocket upgrade, the subprotocol `openai-insecure-api-key.<key>`. With no keys every request is
    allowed. Keys are compared in constant time."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(key.encode() for key in keys)

    @property
    def required(self) -> bool:
        return bool(self._keys)

    def allows(self, authorization: str | None, subprotocols: Iterable[str] = ()) -> bool:
        """Whether a request with these headers may go on."""
        if not self._keys:
            return True
        offered = [p[len(SUBPROTOCOL_PREFIX):] for p in subprotocols if p.startswith(SUBPROTOCOL_PREFIX)]
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer":
            offered.append(token.strip())
        return any(self._matches(candidate) for candidate in offered)

    def _matches(self, candidate: str) -> bool:
        encoded = candidate.encode("utf-8", "replace")
        return any([hmac.compare_digest(encoded, key) for key in self._keys])  # a list: no early exit


def unauthorized() -> JSONResponse:
    """HTTP 401 with an OpenAI-shaped error body."""
    error = {"type": "invalid_request_error", "code": "invalid_api_key", "param": None,
             "message": "missing or wrong API key: send 'Authorization: Bearer <key>' (or, from a browser, the "
                        f"subprotocol '{SUBPROTOCOL_PREFIX}<key>')"}
    return JSONResponse({"error": error}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
