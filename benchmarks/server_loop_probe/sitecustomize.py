"""A probe of a real LiveServe server's event loop, for fitting the simulator's server-loop prices
(benchmarks/sim_fit_server_loop.py). Loaded by Python at start from PYTHONPATH; it acts only in a
`liveserve.cli` process with LIVESERVE_LOOP_PROBE set (a file), and leaves every other process alone.

It serves on asyncio's own loop (not uvloop: only there can the time the loop waits be measured, in its
selector) and appends one JSON line a second of the loop's life to the file: `wall` and `idle` seconds (waiting
in the selector), the client messages read (`messages`, `message_bytes`), the events sent (`events`,
`event_bytes`), the stage outputs routed by stage kind (`routed`), and the VAD batches scored (`vad_batches`,
`vad_steps`, `vad_windows`, and `vad_s`: their time on the worker thread).
"""

import os
import sys

if os.environ.get("LIVESERVE_LOOP_PROBE") and "liveserve.cli" in getattr(sys, "orig_argv", []):
    import json
    import selectors
    import threading
    import time

    import uvicorn
    from starlette.websockets import WebSocket

    from monitor import vad_batcher
    from orchestrator.datapath import stage_bus

    COUNTS = ("messages", "message_bytes", "events", "event_bytes", "vad_batches", "vad_steps", "vad_windows")
    _PID, _PATH = os.getpid(), os.environ["LIVESERVE_LOOP_PROBE"]
    _lock = threading.Lock()
    _second = {"started": None, "t": 0.0}

    def _fresh() -> dict:
        return {"idle": 0.0, "vad_s": 0.0, "routed": {}, **dict.fromkeys(COUNTS, 0)}

    _row = _fresh()

    def _close_second(now: float) -> None:
        global _row
        if _second["started"] is None:
            _second["started"] = _second["t"] = now
        if now - _second["t"] < 1.0:
            return
        with _lock:
            row, _row = _row, _fresh()
        row.update(t=round(_second["t"] - _second["started"], 3), wall=now - _second["t"])
        _second["t"] = now
        if _second.get("out") is None:
            _second["out"] = open(_PATH, "a")  # noqa: SIM115 - held for the process's life, a line flushed a second
        _second["out"].write(json.dumps(row) + "\n")
        _second["out"].flush()

    _select = selectors.EpollSelector.select

    def select(self, timeout=None):
        if os.getpid() != _PID or threading.current_thread() is not threading.main_thread():
            return _select(self, timeout)
        started = time.perf_counter()
        ready = _select(self, timeout)
        now = time.perf_counter()
        _row["idle"] += now - started
        _close_second(now)
        return ready

    selectors.EpollSelector.select = select

    _run = uvicorn.run

    def run(*args, **kwargs):
        return _run(*args, **{**kwargs, "loop": "asyncio"})

    uvicorn.run = run

    _receive, _send_text = WebSocket.receive, WebSocket.send_text

    async def receive(self):
        message = await _receive(self)
        if message.get("text") is not None:
            _row["messages"] += 1
            _row["message_bytes"] += len(message["text"])
        return message

    async def send_text(self, data):
        _row["events"] += 1
        _row["event_bytes"] += len(data)
        return await _send_text(self, data)

    WebSocket.receive, WebSocket.send_text = receive, send_text

    _route = stage_bus.StageBus._route

    def route(self, kind, outputs):
        _row["routed"][kind] = _row["routed"].get(kind, 0) + len(outputs)
        return _route(self, kind, outputs)

    stage_bus.StageBus._route = route

    _score = vad_batcher.score_together

    def score_together(streams):
        started = time.perf_counter()
        scored = _score(streams)
        with _lock:
            _row["vad_s"] += time.perf_counter() - started
            _row["vad_batches"] += 1
            _row["vad_steps"] += max(len(windows) for _, windows in streams)
            _row["vad_windows"] += sum(len(windows) for _, windows in streams)
        return scored

    vad_batcher.score_together = score_together
