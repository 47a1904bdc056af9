"""GET /dashboard (the page), /dashboard/feed (its JSON) and /dashboard/static/NAME, where the config allows them."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from liveserve.config.server import ServerConfig, is_loopback
from liveserve.dashboard.feed import DashboardFeed, ServerView
from liveserve.realtime.auth import ApiKeys

STATIC = Path(__file__).parent / "static"
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css"}
EVERY_MS = (1000, 100, 10_000)  # the page's polling period: default, least, most
REALM = 'Basic realm="LiveServe dashboard", charset="UTF-8"'


def is_dashboard_on(server: ServerConfig, host: str) -> bool:
    """`server.dashboard` when set, else whether the server binds `host` on loopback only."""
    return server.dashboard if server.dashboard is not None else is_loopback(host)


def mount_dashboard(app: FastAPI, server: ServerView, api_keys: ApiKeys, host: str) -> DashboardFeed | None:
    """Add the dashboard's routes to `app` and return its feed (to `run`), or add nothing (every path a 404)
    and return None when it is off for `host`. With API keys, each route needs one, as a bearer token or,
    from a browser, as the password of HTTP basic auth (any user name)."""
    if not is_dashboard_on(server.config.server, host):
        return None
    feed = DashboardFeed(server, server.orch.clock)
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    assets = {path.name: path.read_bytes() for path in STATIC.iterdir() if path.suffix in MEDIA_TYPES}

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard(request: Request, every_ms: str | None = None) -> Response:
        """The page; `every_ms` sets how often it polls the feed (default 1000)."""
        if not _allowed(api_keys, request):
            return _unauthorized()
        period = _whole_number(every_ms, "every_ms", EVERY_MS[0], *EVERY_MS[1:])
        if isinstance(period, Response):
            return period
        return HTMLResponse(page.replace("{{EVERY_MS}}", str(period)), headers={"Cache-Control": "no-store"})

    @app.get("/dashboard/feed", include_in_schema=False)
    async def dashboard_feed(request: Request, since: str | None = None) -> Response:
        """The state now and the samples after number `since` (default 0: all that are kept)."""
        if not _allowed(api_keys, request):
            return _unauthorized()
        after = _whole_number(since, "since", 0, 0, None)
        if isinstance(after, Response):
            return after
        return JSONResponse(feed.state(after), headers={"Cache-Control": "no-store"})

    @app.get("/dashboard/static/{name}", include_in_schema=False)
    async def dashboard_static(request: Request, name: str) -> Response:
        if not _allowed(api_keys, request):
            return _unauthorized()
        if name not in assets:
            return _error(404, "not_found", f"no dashboard file {name!r}; there are {', '.join(sorted(assets))}")
        return Response(assets[name], media_type=MEDIA_TYPES[Path(name).suffix],
                        headers={"Cache-Control": "max-age=3600"})

    return feed


def _allowed(api_keys: ApiKeys, request: Request) -> bool:
    authorization = request.headers.get("authorization")
    if api_keys.allows(authorization):
        return True
    scheme, _, encoded = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        _, _, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return bool(password) and api_keys.allows(f"Bearer {password}")


def _unauthorized() -> JSONResponse:
    return _error(401, "invalid_api_key", "missing or wrong API key: send 'Authorization: Bearer <key>', or from a "
                  "browser give the key as the password (any user name)", {"WWW-Authenticate": REALM})


def _whole_number(text: str | None, name: str, default: int, least: int, most: int | None) -> int | Response:
    """`text` as a whole number in [least, most] (None: `default`), or a 400 that says what was wrong."""
    if text is None:
        return default
    bounds = f"between {least} and {most}" if most is not None else f">= {least}"
    if not (text.isascii() and text.isdigit() and len(text) <= 12) or not least <= int(text) <= (most or int(text)):
        return _error(400, "invalid_value", f"{name} must be a whole number {bounds}, got {text[:40]!r}")
    return int(text)


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    error = {"type": "invalid_request_error", "code": code, "message": message}
    return JSONResponse({"error": error}, status_code=status, headers=headers)
