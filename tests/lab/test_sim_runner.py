"""The simulated runner's step times: the cost model's price, spread by a seeded jitter around it."""

import statistics

import pytest

from lab.sim.cost_model import ChunkCost, DeviceSpec, ModelShape, step_cost
from lab.sim.runner import Placeholders, SimulatedRunner
from stages.plan import ScheduledChunk, SchedulerPlan
from stages.requests import VocoderRequest

MODEL = ModelShape("unit", num_layers=1, hidden=1, num_heads=1, num_kv_heads=1, head_dim=1, intermediate=1, vocab=1,
                   extra_flops_per_token=1e6)
DEVICE = DeviceSpec("cpu", peak_tflops=0.04, hbm_tbps=0.03, memory_gb=24, step_overhead_s=0.004)
PLAN = SchedulerPlan(chunks=[ScheduledChunk(VocoderRequest("r", 0.0, 0), 0, 4)])
PRICE = step_cost(MODEL, DEVICE, [ChunkCost(4, 0, 0)]).seconds


def step_times(jitter: float, seed: str, num_steps: int) -> list[float]:
    runner = SimulatedRunner("vocoder", MODEL, DEVICE, Placeholders(samples_per_frame=2), jitter=jitter, seed=seed)
    times = []
    for _ in range(num_steps):
        runner.execute(PLAN)
        times.append(runner.last_step_s)
    return times


def test_without_jitter_every_step_takes_its_price():
    assert step_times(0.0, "vocoder", 3) == [PRICE] * 3


def test_jittered_steps_spread_around_their_price_the_same_way_for_a_seed():
    times = step_times(0.4, "vocoder", 4000)
    assert times[:50] == step_times(0.4, "vocoder", 50)  # the same seed, the same steps
    assert times[:50] != step_times(0.4, "vocoder-1", 50)
    assert statistics.fmean(times) == pytest.approx(PRICE, rel=0.03)  # the price stays the mean
    assert statistics.pstdev([t / PRICE for t in times]) == pytest.approx(0.4, rel=0.15)  # ~jitter, for a small one
