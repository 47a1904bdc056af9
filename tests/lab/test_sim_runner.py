"""The simulated runner's step times: the cost model's price, times the machine's noise when the step starts."""

import statistics

import pytest

from lab.sim.cost_model import ChunkCost, DeviceSpec, ModelShape, step_cost
from lab.sim.runner import Placeholders, SimulatedRunner
from lab.sim.step_noise import SLOT_S, MachineNoise, StepJitter
from stages.plan import ScheduledChunk, SchedulerPlan
from stages.requests import VocoderRequest

MODEL = ModelShape("unit", num_layers=1, hidden=1, num_heads=1, num_kv_heads=1, head_dim=1, intermediate=1, vocab=1,
                   extra_flops_per_token=1e6)
DEVICE = DeviceSpec("cpu", peak_tflops=0.04, hbm_tbps=0.03, memory_gb=24, step_overhead_s=0.004)
PRICE = step_cost(MODEL, DEVICE, [ChunkCost(4, 0, 0)]).seconds


def plan(now: float) -> SchedulerPlan:
    return SchedulerPlan(now, chunks=[ScheduledChunk(VocoderRequest("r", 0.0, 0, 80.0), 0, 4)])


def step_times(jitter: StepJitter, seed: str, starts) -> list[float]:
    runner = SimulatedRunner("vocoder", MODEL, DEVICE, Placeholders(samples_per_frame=2), jitter=jitter, seed=seed)
    times = []
    for now in starts:
        runner.execute(plan(now))
        times.append(runner.last_step_s)
    return times


def test_without_jitter_every_step_takes_its_price():
    assert step_times(StepJitter(), "vocoder", [0.0, 0.1, 0.2]) == [PRICE] * 3


def test_a_step_takes_its_price_times_the_machines_factor_when_it_starts():
    jitter, starts = StepJitter(0.4, 0.3, 0.5), [i * 2 * SLOT_S for i in range(4000)]
    times = step_times(jitter, "vocoder", starts)
    noise = MachineNoise(jitter, "vocoder")
    assert times[:50] == [PRICE * noise.factor(t) for t in starts[:50]]
    assert times[1000] == step_times(jitter, "vocoder", [starts[1000]])[0]  # the same machine, whatever ran before
    assert times[:50] != step_times(jitter, "vocoder-1", starts[:50])
    assert statistics.fmean(times) == pytest.approx(PRICE, rel=0.05)  # the price stays the mean
