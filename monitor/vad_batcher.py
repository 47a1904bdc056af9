"""Voice activity of many streams scored together: one model call a step over every stream waiting."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from monitor.silero import VoiceConfidence

Waiting = tuple[VoiceConfidence, np.ndarray, asyncio.Future]


class VadBatcher:
    """Scores the VAD windows of many streams together, off the event loop.

    `probabilities(vad, windows)` gives one stream's speech probabilities for its next windows, in order, as
    `vad.speech_probability` would one by one (up to the model's rounding in a batch). A stream whose class has
    `probabilities_together` waits for the next batch: a batch takes every stream's waiting windows and scores
    them in steps, each step one call over the streams with a k-th window, run by `run` (a worker thread); the
    windows that come in meanwhile make the next batch. So the more streams speak at once, the larger the
    batches and the less a window costs (Silero: ~0.2 ms a window alone, ~0.07 in sixteens), and the event loop
    goes on while a batch computes. Other streams are scored at once on the caller's thread. A stream has one
    call waiting at a time (its audio comes in order). Used from one event loop.
    """

    def __init__(self, run: Callable[..., Awaitable[list[np.ndarray]]] = asyncio.to_thread) -> None:
        self.run = run
        self._waiting: list[Waiting] = []
        self._draining: asyncio.Task | None = None
        self.num_batches = self.num_windows = 0

    async def probabilities(self, vad: VoiceConfidence, windows: np.ndarray) -> list[float]:
        if not len(windows):
            return []
        if getattr(type(vad), "probabilities_together", None) is None:
            return [vad.speech_probability(window) for window in windows]
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((vad, windows, future))
        if self._draining is None or self._draining.done():
            self._draining = asyncio.ensure_future(self._drain())
        return list(await future)

    async def _drain(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            self.num_batches += 1
            self.num_windows += sum(len(windows) for _, windows, _ in batch)
            try:
                results = await self.run(score_together, [(vad, windows) for vad, windows, _ in batch])
            except Exception as exc:  # every caller of the batch hears it
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (*_, future), result in zip(batch, results):
                if not future.done():  # its caller may have gone (a closed connection)
                    future.set_result(result)


def score_together(streams: list[tuple[VoiceConfidence, np.ndarray]]) -> list[np.ndarray]:
    """Each stream's probabilities for its windows: step k scores the k-th windows of the streams that have one,
    in one `probabilities_together` call per class of stream."""
    results = [np.empty(len(windows), np.float32) for _, windows in streams]
    for k in range(max(len(windows) for _, windows in streams)):
        rows_by_class: dict[type, list[int]] = {}
        for row, (vad, windows) in enumerate(streams):
            if len(windows) > k:
                rows_by_class.setdefault(type(vad), []).append(row)
        for kind, rows in rows_by_class.items():
            scored = kind.probabilities_together([streams[row][0] for row in rows],
                                                 np.stack([streams[row][1][k] for row in rows]))
            for row, probability in zip(rows, scored):
                results[row][k] = probability
    return results
