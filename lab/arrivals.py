"""When replayed requests start: the arrival process of `vllm bench serve`, recorded
traces, and a cap on requests in flight.

Arrivals are offsets in seconds from the start of the run, one per request, in
request order (non-decreasing).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from numbers import Integral, Real
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def poisson_gamma_arrivals(
    num_requests: int, request_rate: float, burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Arrivals as `vllm bench serve --request-rate R --burstiness B` draws them.

    Inter-arrival times are i.i.d. Gamma(shape=B, scale=1/(R*B)): mean 1/R, squared
    coefficient of variation 1/B. B = 1 is a Poisson process; B < 1 is burstier,
    B > 1 more regular, B = inf a constant 1/R. The first request also waits one
    interval. As vLLM does, the cumulative times are then rescaled so the last
    arrival is exactly `num_requests / R` (the run's throughput does not depend
    on the seed). R = inf releases every request at 0. Same seed, same arrivals.
    """
    _check_count("num_requests", num_requests)
    _check_positive("request_rate", request_rate, allow_inf=True)
    _check_positive("burstiness", burstiness, allow_inf=True)
    if math.isinf(request_rate):
        return [0.0] * num_requests
    if math.isinf(burstiness):
        gaps = np.full(num_requests, 1.0 / request_rate)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=num_requests)
    times = np.cumsum(gaps)
    if times[-1] > 0:
        times *= num_requests / request_rate / times[-1]
    return times.tolist()


def trace_arrivals(timestamps: Sequence[float], time_scale: float = 1.0) -> list[float]:
    """Arrivals replaying a trace: request i starts `(timestamps[i] - timestamps[0]) * time_scale`
    after the first. `time_scale` 0.5 replays twice as fast, 2 half as fast."""
    _check_positive("time_scale", time_scale)
    _check_offsets("timestamps", timestamps)
    return [(t - timestamps[0]) * time_scale for t in timestamps]


class ConcurrencyLimiter:
    """An async context manager letting at most `max_concurrency` requests run at once
    (None = unbounded); the others wait their turn in arrival order."""

    def __init__(self, max_concurrency: int | None = None) -> None:
        if max_concurrency is not None:
            _check_count("max_concurrency", max_concurrency)
        self.max_concurrency = max_concurrency
        self.num_in_flight = 0
        self._slots = None if max_concurrency is None else asyncio.Semaphore(max_concurrency)

    async def __aenter__(self) -> ConcurrencyLimiter:
        if self._slots is not None:
            await self._slots.acquire()
        self.num_in_flight += 1
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.num_in_flight -= 1
        if self._slots is not None:
            self._slots.release()


async def dispatch(
    arrivals: Sequence[float], send: Callable[[int], Awaitable[T]], max_concurrency: int | None = None
) -> list[T]:
    """Release request i at `arrivals[i]` s after the call and run `send(i)`; results in request order.

    As in `vllm bench serve --max-concurrency`, a released request that finds
    `max_concurrency` requests in flight waits for one to finish. `send` should turn
    a failed request into a result: an exception cancels the other requests and is
    raised in an ExceptionGroup.
    """
    _check_offsets("arrivals", arrivals)
    limiter = ConcurrencyLimiter(max_concurrency)
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def run(i: int) -> T:
        async with limiter:
            return await send(i)

    async with asyncio.TaskGroup() as group:
        tasks = []
        for i, at in enumerate(arrivals):
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            tasks.append(group.create_task(run(i)))
    return [task.result() for task in tasks]


def _check_count(name: str, value: object) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_positive(name: str, value: object, allow_inf: bool = False) -> None:
    is_number = isinstance(value, Real) and not isinstance(value, bool)
    ok = is_number and value > 0 and (allow_inf or math.isfinite(value))
    if not ok:
        raise ValueError(f"{name} must be a positive number{' or inf' if allow_inf else ''}, got {value!r}")


def _check_offsets(name: str, values: Sequence[float]) -> None:
    for i, value in enumerate(values):
        if not isinstance(value, Real) or not math.isfinite(value):
            raise ValueError(f"{name}[{i}] must be a finite number, got {value!r}")
        if i and value < values[i - 1]:
            raise ValueError(f"{name} must be non-decreasing: {name}[{i}] = {value} < {values[i - 1]}")
