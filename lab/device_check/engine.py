"""Section `engine`: prefill and decode tokens/s of Qwen3-Omni's native thinker (MoE) at its real layer shapes, random
weights, against the cost model's roofline of the very steps that ran.

Method: lab.engine's (B prompts of `prompt_len` random ids; t1 until each has its first token, t2 until each has
1 + `output_len`; medians of `repeats` runs after a warm-up as long as a t2 run; prefill tok/s = B*prompt_len/t1,
decode tok/s = B*output_len/(t2 - t1)), at two depths (layers built). Each run's steps are recorded and priced by
lab.sim.cost_model.step_cost for the same shape and depth, on the H200's peaks (`roofline`) and as the simulator
prices the thinker (`simulated`: its spec's efficiencies and overheads); the same formulas turn those seconds into
rates, so `*_over_*` is measured over priced. The full depth's time is the two depths' line (a fixed part and a
per-layer part) carried to the model's layer count.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from kvtier.config import DTYPES
from lab.device_check.deadline import Deadline
from lab.device_check.thinker import ThinkerRunners, build_thinker, generation, thinker_config
from lab.engine import Generation, timed_generation
from lab.sim.cost_model import H200, ChunkCost, DeviceSpec, ModelShape, step_cost
from lab.sim.qwen3_omni_shapes import load_shapes
from lab.sim.spec import load_spec


@dataclass(frozen=True)
class EnginePlan:
    """`source`: the served config whose Qwen3-Omni thinker shapes are built (`depths` of its layers) and priced;
    `sim_spec`: the simulation spec whose thinker pricing is checked. A batch starts only if its estimated time
    (the previous batch's times `growth`, at first `first_batch_s`) is left. `threads`: torch's intra-op threads
    while it measures (None: as they are)."""

    device: str
    dtype: str
    source: str
    depths: tuple[int, int]
    batch_sizes: tuple[int, ...]
    prompt_len: int
    output_len: int
    repeats: int
    max_num_batched_tokens: int
    first_batch_s: float
    growth: float = 3.0
    sim_spec: str = "qwen3-omni-1xh200"
    threads: int | None = None


ON_GPU = EnginePlan("cuda", "bfloat16", "qwen3-omni-h200", (2, 6), (1, 16, 64, 256), 128, 128, 2, 8192, 20.0,
                    growth=2.0)
DRY_RUN = EnginePlan("cpu", "float32", "qwen3-omni-tiny-cpu", (1, 2), (1, 2), 16, 16, 2, 512, 1.0, threads=1)


@dataclass(frozen=True)
class Timed:
    """One batch at one depth: the median t1 and t2, and the steps of a t1 run and of a t2 run."""

    t1: float
    t2: float
    t1_steps: list[list[ChunkCost]]
    t2_steps: list[list[ChunkCost]]


@dataclass(frozen=True)
class Pricing:
    """The thinker's cost-model shape at full depth, and the devices a run's recorded steps are priced on."""

    shape: ModelShape
    devices: dict[str, DeviceSpec]

    def compared(self, plan: EnginePlan, batch: int, depth: int, measured: tuple[float, float], priced: Timed) -> dict:
        """Rates from `measured` (t1, t2) beside those of `priced`'s steps at `depth` layers on each device, and the
        ratios measured / priced."""
        shape = dataclasses.replace(self.shape, num_layers=depth)
        rates = {"measured": _rates(plan, batch, *measured)} | {
            name: _rates(plan, batch, *_priced(priced, shape, device)) for name, device in self.devices.items()}
        figures = {"batch": batch, "depth": depth}
        for index, phase in enumerate(("prefill", "decode")):
            figures[f"{phase}_tok_s"] = _figure(rates["measured"][index])
            for name in self.devices:
                figures[f"{name}_{phase}_tok_s"] = _figure(rates[name][index])
                figures[f"{phase}_over_{name}"] = _figure(rates["measured"][index] / rates[name][index])
        return figures


def run_engine(plan: EnginePlan, deadline: Deadline) -> dict:
    config = thinker_config(plan.source)
    pricing = Pricing(_shape(plan), {"roofline": H200, "simulated": _simulated_device(plan.sim_spec)})
    models = {depth: build_thinker(config, depth, plan.device, plan.dtype) for depth in plan.depths}
    if plan.threads is not None:
        torch.set_num_threads(plan.threads)
    measured, full, skipped = measure_batches(plan, models, pricing, deadline)
    return {"model": f"Qwen3-Omni thinker of {plan.source}, native MoE ({config.num_experts} experts, "
                     f"{config.num_experts_per_tok} a token), random weights", "device": plan.device,
            "dtype": plan.dtype, "full_depth": config.num_layers, "depths": list(plan.depths),
            "prompt_len": plan.prompt_len, "output_len": plan.output_len, "repeats": plan.repeats,
            "torch_threads": torch.get_num_threads(),
            "roofline_device": _describe(H200), "simulated_device": f"{plan.sim_spec}: "
            f"{_describe(pricing.devices['simulated'])}", "measured": measured, "full_depth_estimate": full,
            "skipped": skipped}


def measure_batches(plan: EnginePlan, models: dict, pricing: Pricing, deadline: Deadline) -> tuple[list, list, list]:
    """Each batch size in turn at every depth, while its estimate fits: the rows of each depth, the full depth's
    estimate of each batch, and what was skipped."""
    rows, full, skipped, estimate = [], [], [], plan.first_batch_s
    for batch in plan.batch_sizes:
        if not deadline.allows(estimate):
            skipped.append(deadline.reason(f"batch {batch}", estimate))
            break
        started = deadline.clock()
        timed = {depth: measure(plan, model, batch) for depth, model in models.items()}
        estimate = plan.growth * (deadline.clock() - started)
        rows += [pricing.compared(plan, batch, depth, (run.t1, run.t2), run) for depth, run in timed.items()]
        full.append(full_depth(plan, batch, timed, pricing))
    return rows, full, skipped


def measure(plan: EnginePlan, model: torch.nn.Module, batch: int) -> Timed:
    runners = ThinkerRunners(model, plan.device)
    gen = generation(runners, plan.dtype, plan.prompt_len, max(plan.batch_sizes), plan.max_num_batched_tokens)
    timed_generation(gen, batch, plan.output_len + 1)  # a warm-up as long as the timed runs: every shape they meet
    t1, t1_steps = _median_run(gen, runners, batch, 1, plan.repeats)
    t2, t2_steps = _median_run(gen, runners, batch, plan.output_len + 1, plan.repeats)
    return Timed(t1, t2, t1_steps, t2_steps)


def _median_run(gen: Generation, runners: ThinkerRunners, batch: int, max_tokens: int, repeats: int):
    seconds = statistics.median(timed_generation(gen, batch, max_tokens) for _ in range(repeats))
    return seconds, runners.last.steps


def full_depth(plan: EnginePlan, batch: int, timed: dict[int, Timed], pricing: Pricing) -> dict:
    """The rates at the model's full depth: t1 and t2 on the line through the two depths' (a fixed part plus a
    per-layer part), beside the price of the deeper run's steps at full depth; and the decode step's time per layer."""
    (low, t_low), (high, t_high) = sorted(timed.items())
    layers = pricing.shape.num_layers

    def extend(a: float, b: float) -> float:
        return a + (b - a) * (layers - low) / (high - low)

    per_layer_ms = 1000 * (t_high.t2 - t_high.t1 - t_low.t2 + t_low.t1) / (high - low) / plan.output_len
    measured = (extend(t_low.t1, t_high.t1), extend(t_low.t2, t_high.t2))
    figures = pricing.compared(plan, batch, layers, measured, t_high)
    return {**figures, "decode_step_ms_per_layer": _figure(per_layer_ms)}


def _priced(timed: Timed, shape: ModelShape, device: DeviceSpec) -> tuple[float, float]:
    """t1 and t2 as `device` prices the recorded steps of `shape`."""
    t1 = sum(step_cost(shape, device, chunks).seconds for chunks in timed.t1_steps)
    return t1, sum(step_cost(shape, device, chunks).seconds for chunks in timed.t2_steps)


def _rates(plan: EnginePlan, batch: int, t1: float, t2: float) -> tuple[float, float]:
    return batch * plan.prompt_len / t1, batch * plan.output_len / (t2 - t1)


def _figure(value: float) -> float:
    """`value` to 4 significant digits."""
    return float(f"{value:.4g}")


def _shape(plan: EnginePlan) -> ModelShape:
    """The thinker's cost-model shape, its bytes per weight and per KV value those of `plan.dtype`."""
    size = torch.empty(0, dtype=DTYPES[plan.dtype]).element_size()
    shape = load_shapes(plan.source, Path.cwd())["thinker"]
    return dataclasses.replace(shape, bytes_per_param=size, bytes_per_kv=size)


def _simulated_device(name: str) -> DeviceSpec:
    """The device the simulation spec prices its thinker on, with the thinker's own overheads."""
    spec = load_spec(name)
    thinker = spec.stages["thinker"]
    return thinker.priced_on(spec.devices[thinker.devices[0]])


def _describe(device: DeviceSpec) -> str:
    return (f"{device.name}, {device.peak_tflops:g} TFLOP/s x {device.compute_efficiency:g}, "
            f"{device.hbm_tbps:g} TB/s x {device.bandwidth_efficiency:g}, step overhead "
            f"{1000 * device.step_overhead_s:g} ms, row overhead {1000 * device.row_overhead_s:g} ms")
