"""The HTTP/WebSocket server: /v1/realtime, /health, /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from fastapi.responses import Response
from starlette.websockets import WebSocketState

from liveserve.config import LiveServeConfig
from liveserve.realtime.errors import RealtimeError
from liveserve.realtime.metrics import ServerMetrics
from liveserve.realtime.naming import Dialect, new_id
from liveserve.realtime.session import RealtimeSession
from liveserve.realtime.settings import SessionSettings
from liveserve.runtime import configure_torch
from monitor import MonitorRegistry
from orchestrator.orchestrator import Orchestrator

log = logging.getLogger(__name__)
CLOSE_TRY_AGAIN_LATER = 1013


class RealtimeServer:
    """One orchestrator shared by every connection, admission by `max_sessions`.

    `monitors` holds every live session's interaction monitor (playback, speech,
    barge-in), keyed by session id.
    """

    def __init__(self, config: LiveServeConfig) -> None:
        self.config = config
        self.orch = Orchestrator(config.pipeline)
        self.metrics = ServerMetrics(self.orch.status)
        self.monitors = MonitorRegistry()
        self.sessions: set[RealtimeSession] = set()

    async def serve_connection(self, ws: WebSocket) -> None:
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        if len(self.sessions) >= self.config.server.max_sessions:
            await self._reject(ws)
            return
        dialect = Dialect(ws.headers.get("openai-beta", "").startswith("realtime=v1"))
        model = ws.query_params.get("model") or self.config.model_name
        session = RealtimeSession(self.orch, SessionSettings(model=model), dialect, ws.send_json, self.metrics)
        self.sessions.add(session)
        self.monitors.add(session.monitor)
        self.metrics.live_sessions.set(len(self.sessions))
        try:
            await self._receive_loop(ws, session)
        finally:
            self.sessions.discard(session)
            self.monitors.remove(session.session_id)
            self.metrics.live_sessions.set(len(self.sessions))
            self.metrics.underruns.inc(session.monitor.playback.num_underruns)
            await session.close()
            await _close_quietly(ws)

    async def _receive_loop(self, ws: WebSocket, session: RealtimeSession) -> None:
        idle = self.config.server.idle_timeout_s
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                try:
                    message = await asyncio.wait_for(ws.receive(), timeout=idle)
                except TimeoutError:
                    session.emit_error(RealtimeError("idle_timeout", f"no client event for {idle:g} s; closing"))
                    return
                if message["type"] == "websocket.disconnect":
                    return
                await session.handle(message.get("text") if message.get("text") is not None else message.get("bytes"))

    async def _reject(self, ws: WebSocket) -> None:
        self.metrics.rejected_sessions.inc()
        error = RealtimeError("session_capacity_exceeded",
                              f"the server is at its limit of {self.config.server.max_sessions} sessions; try again later",
                              error_type="server_error")
        await ws.send_json({"type": "error", "event_id": new_id("event"), "error": error.payload(None)})
        await ws.close(code=CLOSE_TRY_AGAIN_LATER)


async def _close_quietly(ws: WebSocket) -> None:
    if ws.application_state != WebSocketState.DISCONNECTED:
        with contextlib.suppress(Exception):
            await ws.close()


def create_app(config: LiveServeConfig) -> FastAPI:
    server = RealtimeServer(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        configure_torch(config.runtime)
        await server.orch.start()
        try:
            yield
        finally:
            await server.orch.stop()

    app = FastAPI(title="LiveServe", lifespan=lifespan)
    app.state.server = server

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": config.model_name, "sessions": len(server.sessions),
                "max_sessions": config.server.max_sessions}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.websocket("/v1/realtime")
    async def realtime(ws: WebSocket) -> None:
        await server.serve_connection(ws)

    return app
