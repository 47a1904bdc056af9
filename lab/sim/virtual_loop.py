"""An asyncio event loop on a virtual clock: with nothing ready it jumps to its next timer."""

from __future__ import annotations

import asyncio
import selectors


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`time()` is virtual: it starts at 0 and moves only when every task waits, straight to the next
    timer, so a sleep costs no wall time and a run is as deterministic as its tasks. Executor work
    (`asyncio.to_thread`) runs inline on the loop's thread. Waiting with no timer and no thread to hear
    from would wait forever: RuntimeError instead. Only in-memory transports make sense on it.
    """

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(selector=_JumpingSelector(self))

    def call_later(self, delay, callback, *args, context=None):
        """As asyncio's, but a positive delay is at least the clock's resolution: asyncio runs a timer due
        within that resolution at once, so a task waiting for the clock to pass a mark it misses by a
        rounding error would otherwise sleep and wake without time moving, for ever."""
        if 0 < delay < self._clock_resolution:
            delay = self._clock_resolution
        return super().call_later(delay, callback, *args, context=context)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def run_in_executor(self, executor, func, *args):
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as exc:  # the awaiting task gets it, as from a thread
            future.set_exception(exc)
        return future


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; where the loop would wait `timeout` seconds, the clock jumps instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None):
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("the simulation is stuck: every task waits and no timer is set")
        self.loop.advance(timeout)
        return []
