"""Arrival processes (as `vllm bench serve`), trace replay and the concurrency cap."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from lab.arrivals import ConcurrencyLimiter, dispatch, poisson_gamma_arrivals, trace_arrivals


def _gaps(arrivals: list[float]) -> np.ndarray:
    return np.diff([0.0, *arrivals])  # the first request also waits one interval


def test_infinite_rate_releases_everything_at_once():
    assert poisson_gamma_arrivals(5, math.inf, burstiness=0.3, seed=1) == [0.0] * 5


def test_same_seed_same_arrivals():
    assert poisson_gamma_arrivals(50, 3.0, 0.7, seed=42) == poisson_gamma_arrivals(50, 3.0, 0.7, seed=42)
    assert poisson_gamma_arrivals(50, 3.0, 0.7, seed=42) != poisson_gamma_arrivals(50, 3.0, 0.7, seed=43)


def test_mean_inter_arrival_is_one_over_rate():
    arrivals = poisson_gamma_arrivals(20_000, 4.0, seed=0)
    assert np.all(np.diff(arrivals) >= 0) and arrivals[0] > 0
    assert _gaps(arrivals)[:10_000].mean() == pytest.approx(0.25, rel=0.03)  # not forced by the rescaling
    assert arrivals[-1] == pytest.approx(20_000 / 4.0)  # rescaled like vLLM


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_burstiness_sets_the_variance(burstiness):
    # Gamma(k, theta): CV^2 = variance / mean^2 = 1 / k
    gaps = _gaps(poisson_gamma_arrivals(20_000, 2.0, burstiness, seed=7))
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.1)


def test_infinite_burstiness_is_a_constant_rate():
    assert poisson_gamma_arrivals(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_requests": 0}, "num_requests"),
        ({"num_requests": 2.5}, "num_requests"),
        ({"request_rate": 0.0}, "request_rate"),
        ({"request_rate": float("nan")}, "request_rate"),
        ({"burstiness": -1.0}, "burstiness"),
        ({"burstiness": "1"}, "burstiness"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    args = {"num_requests": 3, "request_rate": 1.0, "burstiness": 1.0, **kwargs}
    with pytest.raises(ValueError, match=name):
        poisson_gamma_arrivals(**args)


def test_trace_arrivals_shift_and_scale():
    assert trace_arrivals([100.0, 100.5, 102.0], time_scale=2.0) == pytest.approx([0.0, 1.0, 4.0])
    assert trace_arrivals([]) == []
    with pytest.raises(ValueError, match="timestamps"):
        trace_arrivals([1.0, 0.5])
    with pytest.raises(ValueError, match="time_scale"):
        trace_arrivals([1.0], time_scale=0)


def _dispatch_and_watch(arrivals, max_concurrency, work_s=0.05):
    """Runs dispatch with requests that sleep `work_s`; returns (results, peak in flight, start offsets)."""
    in_flight, peak, starts = 0, 0, {}

    async def send(i):
        nonlocal in_flight, peak
        starts[i] = asyncio.get_running_loop().time() - t0
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(work_s)
        in_flight -= 1
        return f"done {i}"

    async def main():
        nonlocal t0
        t0 = asyncio.get_running_loop().time()
        return await dispatch(arrivals, send, max_concurrency)

    t0 = 0.0
    results = asyncio.run(main())
    return results, peak, starts


def test_concurrency_never_exceeds_the_limit():
    results, peak, starts = _dispatch_and_watch([0.0] * 6, max_concurrency=2)
    assert results == [f"done {i}" for i in range(6)]  # request order
    assert peak == 2
    assert starts[5] >= 0.1 - 0.01  # two waves of 50 ms before the third pair starts


def test_unbounded_runs_everything_at_once():
    _, peak, _ = _dispatch_and_watch([0.0] * 6, max_concurrency=None)
    assert peak == 6


def test_requests_start_at_their_arrival_times():
    _, _, starts = _dispatch_and_watch([0.0, 0.05, 0.12], max_concurrency=None, work_s=0.0)
    for i, at in enumerate([0.0, 0.05, 0.12]):
        assert at - 0.005 <= starts[i] <= at + 0.05


def test_limiter_counts_in_flight_and_validates():
    async def main():
        limiter = ConcurrencyLimiter(1)
        async with limiter:
            assert limiter.num_in_flight == 1
        return limiter.num_in_flight

    assert asyncio.run(main()) == 0
    with pytest.raises(ValueError, match="max_concurrency"):
        ConcurrencyLimiter(0)
    with pytest.raises(ValueError, match="arrivals"):
        asyncio.run(dispatch([1.0, 0.0], lambda i: asyncio.sleep(0)))


def test_a_failing_send_stops_the_run():
    async def send(i):
        if i == 1:
            raise RuntimeError("boom")
        await asyncio.sleep(1.0)

    with pytest.raises(ExceptionGroup) as caught:
        asyncio.run(dispatch([0.0, 0.0, 0.0], send))
    assert caught.group_contains(RuntimeError, match="boom")
