"""The server process's event loop, priced: one thread that reads the clients' messages, routes the stages'
outputs and sends the clients' events, one piece of work at a time."""

from __future__ import annotations

import asyncio
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LoopPrices:
    """Seconds of the server's event loop (wall time on its machine, which it shares with the stages) for a
    client message read and handled (an audio append: its JSON, base64, resampling, VAD framing) and for a stage
    output routed (handed to the next stage or sent to the client as events). A VAD batch runs on a worker
    thread: `vad_step_s` a step (one call over the streams with a k-th window), `vad_window_s` a window. All
    zero (the default): the loop costs nothing."""

    message_s: float = 0.0
    output_s: float = 0.0
    vad_step_s: float = 0.0
    vad_window_s: float = 0.0


class ServerLoop:
    """The server's loop as one queue: a piece of work starts once the loop is free of the work before it and
    takes its price, so when more comes than the loop can do, everything waits longer, in the order it came.
    Each piece's effect (a message handed to its session, an output routed, an event reaching its client)
    happens when that piece is done; free work given while the loop is free takes effect at once, so with no
    prices nothing waits. Used on a VirtualTimeLoop (the server's code itself takes no virtual time).
    `busy_s` sums the prices of the work given, and `waits_s` holds each piece's wait for the work before it.
    """

    def __init__(self, prices: LoopPrices = LoopPrices()) -> None:
        self.prices = prices
        self.busy_s = 0.0
        self.waits_s = array("d")
        self._free_at = 0.0
        self._pending: deque[tuple[float, Callable[..., Any], tuple]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def later(self, cost_s: float, callback: Callable[..., Any], *args: Any) -> None:
        """Call `callback(*args)` once work of `cost_s` given now is done, after the work given before it."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        starts_at = max(self._free_at, now)
        self.waits_s.append(starts_at - now)
        self.busy_s += cost_s
        self._free_at = starts_at + cost_s
        if not self._pending and self._free_at <= now:
            callback(*args)
            return
        self._pending.append((self._free_at, callback, args))
        if self._timer is None:
            self._timer = loop.call_at(self._pending[0][0], self._run_due)

    async def spend(self, cost_s: float) -> None:
        """Wait until work of `cost_s` given now is done."""
        done = asyncio.get_running_loop().create_future()
        self.later(cost_s, _resolve, done)
        await done

    def figures(self) -> dict[str, Any]:
        """What a result reports of the loop: the seconds of work it was given, and how long pieces of work waited
        for the work before them (ms)."""
        waits_ms = np.frombuffer(self.waits_s) * 1000.0 if self.waits_s else np.zeros(1)
        p50, p90, p99 = (round(float(v), 3) for v in np.percentile(waits_ms, [50, 90, 99]))
        return {"busy_s": round(self.busy_s, 3),
                "wait_ms": {"p50": p50, "p90": p90, "p99": p99, "max": round(float(waits_ms.max()), 3)}}

    def _run_due(self) -> None:
        loop = asyncio.get_running_loop()
        now = max(loop.time(), self._pending[0][0])  # asyncio runs a timer up to its clock's resolution early
        try:
            while self._pending and self._pending[0][0] <= now:
                _, callback, args = self._pending.popleft()
                callback(*args)
        finally:  # a callback that raised leaves the rest queued, not stuck
            self._timer = loop.call_at(self._pending[0][0], self._run_due) if self._pending else None

    def routing(self, sink: Callable[[str, list], None]) -> Callable[[str, list], None]:
        """`sink` reached once the loop has routed the outputs."""
        def route(kind: str, outputs: list) -> None:
            self.later(self.prices.output_s * len(outputs), sink, kind, outputs)
        return route

    async def score_vad(self, score: Callable[[list], list[np.ndarray]], streams: list) -> list[np.ndarray]:
        """A VadBatcher's `run`: the batch scored on its thread (priced by its steps and windows), then its
        result back on the loop."""
        result = score(streams)
        steps = max(len(windows) for _, windows in streams)
        windows = sum(len(windows) for _, windows in streams)
        thread_s = self.prices.vad_step_s * steps + self.prices.vad_window_s * windows
        if thread_s:
            await asyncio.sleep(thread_s)
        await self.spend(0.0)
        return result


def _resolve(future: asyncio.Future) -> None:
    if not future.done():  # its waiter may have been cancelled
        future.set_result(None)
