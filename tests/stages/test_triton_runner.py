"""The GPU path of the decoder runners, run on the CPU: the Triton kernels (in the interpreter) reading and writing
the paged KV of greedy generations through the scheduler, and results brought back to host memory."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from stages.config import SamplingParams, SchedulerConfig
from stages.models.llama import LlamaForCausalLM
from stages.models.weights import init_deterministic
from stages.requests import ThinkerRequest, TurnInput
from stages.requests.thinker import TalkerRows
from stages.runners.decoder import ThinkerRunner
from stages.runners.on_device import OnDeviceRunner, to_host
from stages.scheduler import Scheduler
from tests.stages.test_paged_attention import PROMPTS, drive, kv_for, tiny_decoder

triton_paged = pytest.importorskip("stages.models.kernels.triton_paged")
pytestmark = pytest.mark.usefixtures("triton_interpreter")


def greedy(model, num_blocks: int, triton: bool) -> dict[str, list]:
    kv = kv_for(model.config, num_blocks)
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=6), kv, clock=lambda: 0.0)
    for i, (rid, prompt) in enumerate(PROMPTS.items()):
        request = ThinkerRequest(rid, arrival_time=float(i), stop_ids=frozenset(), max_position=256)
        request.append(TurnInput(prompt, [], SamplingParams(temperature=0.0, max_tokens=5)), close=True)
        scheduler.add(request)
    runner = ThinkerRunner(model, kv)
    if triton:
        kernels = triton_paged.load()
        runner.decode_kernel, runner.prefill_kernel = kernels.decode, kernels.prefill
        runner = OnDeviceRunner(runner)
    return drive(scheduler, runner)


@pytest.mark.parametrize("num_blocks", [64, 9])  # 9 blocks of 4: preemption recomputes through the prefill kernel
def test_a_thinker_reading_its_kv_with_the_triton_kernels_generates_what_the_c_path_does(num_blocks):
    model = LlamaForCausalLM(tiny_decoder(vocab_size=300))
    init_deterministic(model, seed=1)
    expected, got = greedy(model, num_blocks, triton=False), greedy(model, num_blocks, triton=True)
    for rid in PROMPTS:
        assert [s.token_id for s in got[rid]] == [s.token_id for s in expected[rid]], rid
        torch.testing.assert_close(torch.stack([s.hidden for s in got[rid]]),
                                   torch.stack([s.hidden for s in expected[rid]]), atol=1e-4, rtol=1e-4)


@dataclass(frozen=True)
class Sampled:
    token: int
    hidden: torch.Tensor


def test_results_come_back_to_host_memory_in_float32_whatever_holds_them():
    rows = TalkerRows([3, 4], torch.ones(2, 8, dtype=torch.bfloat16), [False, True], (7, torch.zeros(8).half()))
    moved = to_host({"a": rows, "b": [Sampled(1, torch.ones(2, dtype=torch.bfloat16))], "c": None,
                     "d": torch.arange(3)})
    assert isinstance(moved["a"], TalkerRows) and moved["a"].rows.dtype == torch.float32
    assert moved["a"].sample[0] == 7 and moved["a"].sample[1].dtype == torch.float32
    assert moved["b"][0].hidden.dtype == torch.float32 and moved["c"] is None
    assert moved["d"].dtype == torch.int64  # ids keep their type
