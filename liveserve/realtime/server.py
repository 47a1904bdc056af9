"""The HTTP/WebSocket server: /v1/realtime, /health, /metrics and, where allowed, /dashboard."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response
from starlette.websockets import WebSocketState

from liveserve.admission import KVWatch, make_admission
from liveserve.config.loader import LiveServeConfig
from liveserve.dashboard.routes import mount_dashboard
from liveserve.realtime.auth import ApiKeys, unauthorized
from liveserve.realtime.errors import RealtimeError
from liveserve.realtime.ingest_pacer import IngestPacer
from liveserve.realtime.metrics import ServerMetrics
from liveserve.realtime.naming import Dialect, new_id
from liveserve.realtime.response_trace import ResponseTrace
from liveserve.realtime.session import RealtimeSession
from liveserve.realtime.settings import SessionSettings
from liveserve.runtime import configure_torch, freeze_startup_objects, make_placement
from orchestrator.orchestrator import Orchestrator
from orchestrator.placement.base import Placement

log = logging.getLogger(__name__)
CLOSE_TRY_AGAIN_LATER = 1013
SAMPLE_PERIOD_S = 0.5  # KV pools sampled and the admission gate ticked this often (at most)
MIB = 1024 * 1024
INGEST_BURST_MIB = 32  # the largest message (ws_max_size) is read at once


class RealtimeServer:
    """One orchestrator shared by every connection.

    Connections beyond `server.max_sessions` are refused (close code 1013). Full-duplex streams,
    whose per-frame latency a controller can judge, are admitted by `gate` (`admission.policy`:
    fixed, or aimd on that latency) when a session turns duplex mode on. While `watch` runs, it
    samples the stages' KV pools into `kv_watch` and ticks the gate; sessions report each duplex
    frame's latency to `frame_done`. With `server.api_keys` set, an upgrade without one of them gets
    HTTP 401 before any session state exists. `placement` (default: as `runtime.placement` says) and
    `clock` (default: time.monotonic) are a simulation's to replace.
    """

    def __init__(self, config: LiveServeConfig, placement: Placement | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.clock = config, clock
        self.api_keys = ApiKeys(config.server.api_keys)
        placement = placement or make_placement(config)
        self.orch = Orchestrator(config.pipeline, placement=placement, clock=clock)
        self.metrics = ServerMetrics(self.orch.status, clock)
        self.sessions: set[RealtimeSession] = set()
        self.num_rejected = 0  # connections refused at server.max_sessions
        self.gate = make_admission(config.admission, config.duplex.frame_ms / 1000, config.server.max_sessions)
        self.kv_watch = KVWatch(config.admission.forecast_window_s, config.duplex.expected_session_s)
        self.metrics.watch_admission(self.gate, self.kv_watch)
        trace_dir = config.runtime.trace_dir
        self.response_trace = ResponseTrace(trace_dir / "responses.jsonl") if trace_dir is not None else None

    async def serve_connection(self, ws: WebSocket) -> None:
        offered = ws.scope.get("subprotocols") or []
        if not self.api_keys.allows(ws.headers.get("authorization"), offered):
            await ws.send_denial_response(unauthorized())
            return
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        if len(self.sessions) >= self.config.server.max_sessions:
            await self._reject(ws)
            return
        dialect = Dialect(ws.headers.get("openai-beta", "").startswith("realtime=v1"))
        model = ws.query_params.get("model") or self.config.model_name
        modalities = ("audio",) if self.orch.geometry.graph.speaks else ("text",)
        settings = SessionSettings(model=model, output_modalities=modalities)
        session = RealtimeSession(self.orch, settings, dialect, ws.send_text, self.metrics,
                                  on_frame_latency=self.frame_done, response_trace=self.response_trace,
                                  admit_stream=self.admit_stream)
        self.sessions.add(session)
        self.metrics.live_sessions.set(len(self.sessions))
        try:
            await self._receive_loop(ws, session)
        finally:
            self.sessions.discard(session)
            self.metrics.live_sessions.set(len(self.sessions))
            await session.close()
            self.metrics.count_session(session.controller)
            await _close_quietly(ws, session.end_code)

    @property
    def num_streams(self) -> int:
        """Sessions in full-duplex mode."""
        return sum(session.duplex is not None for session in self.sessions)

    def admit_stream(self) -> int | None:
        """Whether one more duplex stream may start: None if admitted, else the gate's cap."""
        return None if self.gate.admit(self.num_streams, self.clock()) else self.gate.cap

    def frame_done(self, latency_s: float) -> None:
        """One duplex frame answered `latency_s` after it was due: export it and feed the gate."""
        self.metrics.observe_frame(latency_s)
        self.gate.observe_frame(latency_s, self.clock())

    def sample(self, now: float) -> None:
        """Sample the stages' KV pools and run the gate's control law if its interval has passed."""
        self.kv_watch.sample(self.orch.status(), len(self.sessions), now)
        adjustment = self.gate.tick(self.num_streams, now)
        if adjustment is not None and adjustment.decision != "hold":
            log.info("admission: %s to a cap of %d duplex streams (%d live, p99 frame latency %.1f ms over %d frames)",
                     adjustment.decision, adjustment.cap, adjustment.live, 1000 * adjustment.p99_s,
                     adjustment.num_frames)

    async def watch(self) -> None:
        """`sample` periodically until cancelled."""
        period = min(SAMPLE_PERIOD_S, self.config.admission.interval_s)
        while True:
            self.sample(self.clock())
            await asyncio.sleep(period)

    async def _receive_loop(self, ws: WebSocket, session: RealtimeSession) -> None:
        """Hand the client's messages to the session until it disconnects, idles out or the session ends.
        One deadline serves the whole connection: armed while a message is awaited (the idle timeout, or
        now once the session ends), never while one is handled."""
        idle = self.config.server.idle_timeout_s
        loop = asyncio.get_running_loop()
        ended = asyncio.ensure_future(session.ended.wait())
        try:
            async with asyncio.timeout(None) as reading:
                def stop_reading(_: asyncio.Future) -> None:
                    if reading.when() is not None:
                        reading.reschedule(loop.time())

                ended.add_done_callback(stop_reading)
                try:
                    await self._read_messages(ws, session, reading, ended)
                finally:
                    ended.remove_done_callback(stop_reading)
        except TimeoutError:
            if not session.ended.is_set():
                session.emit_error(RealtimeError("idle_timeout", f"no client event for {idle:g} s; closing"))
        finally:
            ended.cancel()

    async def _read_messages(self, ws: WebSocket, session: RealtimeSession, reading: asyncio.Timeout,
                             ended: asyncio.Future) -> None:
        """Read and handle messages no faster than `server.ingest_mib_per_s` (an IngestPacer), so one
        client's stream of big messages cannot keep the event loop from the other sessions."""
        pacer = IngestPacer(self.config.server.ingest_mib_per_s * MIB, INGEST_BURST_MIB * MIB)
        idle, loop = self.config.server.idle_timeout_s, asyncio.get_running_loop()
        with contextlib.suppress(WebSocketDisconnect):
            while not session.ended.is_set():
                reading.reschedule(loop.time() + idle)
                message = await ws.receive()
                reading.reschedule(None)
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text") if message.get("text") is not None else message.get("bytes")
                wait_s = pacer.took(len(raw or ""), self.clock())
                await session.handle(raw)
                if wait_s:
                    await asyncio.wait({ended}, timeout=wait_s)

    async def _reject(self, ws: WebSocket) -> None:
        self.metrics.rejected_sessions.inc()
        self.num_rejected += 1
        error = RealtimeError("session_capacity_exceeded",
                              f"the server is at its limit of {self.config.server.max_sessions} sessions; "
                              "try again later",
                              error_type="server_error")
        await ws.send_json({"type": "error", "event_id": new_id("event"), "error": error.payload(None)})
        await ws.close(code=CLOSE_TRY_AGAIN_LATER)


async def _close_quietly(ws: WebSocket, code: int = 1000) -> None:
    if ws.application_state != WebSocketState.DISCONNECTED:
        with contextlib.suppress(Exception):
            await ws.close(code=code)


def create_app(config: LiveServeConfig, host: str | None = None) -> FastAPI:
    """The app serving `config`, bound to `host` (default `server.host`: it decides whether /dashboard is on)."""
    server = RealtimeServer(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        configure_torch(config.runtime)
        await server.orch.start()
        freeze_startup_objects()
        watches = [asyncio.ensure_future(server.watch())]
        if dashboard is not None:
            watches.append(asyncio.ensure_future(dashboard.run()))
        try:
            yield
        finally:
            for watch in watches:
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            await server.orch.stop()
            if server.response_trace is not None:
                server.response_trace.close()

    app = FastAPI(title="LiveServe", lifespan=lifespan)
    app.state.server = server
    dashboard = mount_dashboard(app, server, server.api_keys, host or config.server.host)

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 {"status": "ok"} while every stage serves; 503 {"status": "degraded", "stages_down": {stage: why}}."""
        down = server.orch.bus.down()
        body = {"status": "degraded" if down else "ok", "model": config.model_name, "sessions": len(server.sessions),
                "max_sessions": config.server.max_sessions, "admission_cap": server.gate.cap,
                "duplex_frame_ms": config.duplex.frame_ms, "stages_down": down}
        return JSONResponse(body, status_code=503 if down else 200)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        """The Prometheus metrics; with `server.api_keys` set, only for a request that carries a key."""
        if not server.api_keys.allows(request.headers.get("authorization")):
            return unauthorized()
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.websocket("/v1/realtime")
    async def realtime(ws: WebSocket) -> None:
        await server.serve_connection(ws)

    return app
