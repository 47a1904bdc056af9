"""Tool calls constrained in tiny-omni's thinker stage (random weights): a forced call is a valid call whatever
the sampling, beside an unconstrained request it leaves as it was; auto leaves a reply that does not begin a
call as it was; a preempted call recomputes to the same tokens; a cut call leaves nothing behind; a stage
that cannot constrain, or a schema that does not compile, fails the turn and nothing else."""

from __future__ import annotations

import pickle

import pytest

from kvtier import KVCacheManager, KVPoolConfig
from liveserve.config.loader import load_config
from stages.commands import AddRequest, AppendInput, StopGeneration
from stages.config import SamplingParams, SchedulerConfig
from stages.engine import StageEngine
from stages.factory import build_model, runner_of, thinker_text
from stages.requests.thinker import ThinkerRequest, TurnInput
from stages.requests.tool_call import ToolCallConstraint
from stages.scheduler import Scheduler
from tests.stages.tool_call_schemas import AUTO, FORCED, assert_valid_call

MAX_TOKENS = 120
SAMPLINGS = [SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)] + [
    SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=seed) for seed in range(3)]
QUESTIONS = {"call": "What's the weather in Paris for the next three days?", "free": "Tell me a story.",
             "other": "And in Rome?"}


@pytest.fixture(scope="module")
def tiny():
    spec = load_config("tiny-omni-cpu").pipeline.thinker
    return spec, build_model(spec), thinker_text(spec)[0]


def engine_of(tiny, num_blocks: int = 64, budget: int = 512) -> StageEngine:
    """tiny-omni's thinker stage over a pool of `num_blocks` blocks of 4, `budget` tokens a round (fcfs)."""
    spec, model, _ = tiny
    decoder = spec.model
    kv = KVCacheManager(KVPoolConfig(num_blocks=num_blocks, block_size=4, num_layers=decoder.num_layers,
                                     num_kv_heads=decoder.num_kv_heads, head_dim=decoder.head_dim))
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=budget), kv, clock=lambda: 0.0)
    return StageEngine("thinker", scheduler, runner_of(spec, model, kv), lambda outputs: None)


def prompt(tiny, name: str) -> list[int]:
    return tiny[2].encode(f"<|im_start|>user\n{QUESTIONS[name]}<|im_end|>\n<|im_start|>assistant\n")


def run(engine: StageEngine, tiny, turns: dict[str, TurnInput]) -> tuple[dict[str, list[int]], list[str]]:
    """Each turn as a request of its own (in order of arrival); the tokens each generated, and who was
    preempted (in order)."""
    engine.submit_all([command for i, (rid, turn) in enumerate(turns.items()) for command in (
        AddRequest(ThinkerRequest(rid, float(i), tiny[2].stop_ids, 1024)), AppendInput(rid, turn, close=True))])
    tokens: dict[str, list[int]] = {rid: [] for rid in turns}
    preempted, finished = [], set()
    while len(finished) < len(turns):
        plan = engine.plan_step()
        preempted += plan.preempted
        for output in engine.commit_step(plan, engine.execute(plan), 0.0):
            assert output.error is None, output.error
            if output.payload is not None:
                tokens[output.request_id].append(output.payload.token_id)
            if output.is_finished:
                finished.add(output.request_id)
    return tokens, preempted


def assert_a_call(tiny, tokens: list[int]) -> None:
    """`tokens` are a valid call, then a stop token (the generation's reason: "stop")."""
    assert tokens[-1] in tiny[2].stop_ids and len(tokens) < MAX_TOKENS
    assert_valid_call(tiny[2].decode(tokens[:-1]))


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "t1-seed0", "t1-seed1", "t1-seed2"])
def test_a_forced_call_is_valid_and_leaves_the_unconstrained_request_beside_it_as_it_was(tiny, sampling):
    alone, _ = run(engine_of(tiny), tiny, {"free": TurnInput(prompt(tiny, "free"), sampling=sampling)})
    both, _ = run(engine_of(tiny), tiny, {"call": TurnInput(prompt(tiny, "call"), sampling=sampling, constraint=FORCED),
                                          "free": TurnInput(prompt(tiny, "free"), sampling=sampling)})
    assert_a_call(tiny, both["call"])
    assert both["free"] == alone["free"]


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["greedy", "t1-seed0", "t1-seed1", "t1-seed2"])
def test_auto_leaves_a_reply_that_does_not_begin_a_call_as_it_was(tiny, sampling):
    free, _ = run(engine_of(tiny), tiny, {"r": TurnInput(prompt(tiny, "call"), sampling=sampling)})
    auto, _ = run(engine_of(tiny), tiny, {"r": TurnInput(prompt(tiny, "call"), sampling=sampling, constraint=AUTO)})
    assert not tiny[2].decode(free["r"]).startswith(AUTO.begin)  # random weights: the model does not call
    assert auto == free


def test_a_preempted_call_recomputes_in_chunks_and_goes_on_with_the_same_tokens(tiny):
    sampling = SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=7)
    turns = {"other": TurnInput(prompt(tiny, "other"), sampling=SamplingParams(temperature=0.0, max_tokens=60)),
             "call": TurnInput(prompt(tiny, "call"), sampling=sampling, constraint=FORCED)}  # arrives last: the victim
    roomy, preempted = run(engine_of(tiny), tiny, turns)
    assert preempted == []
    cramped, preempted = run(engine_of(tiny, num_blocks=28, budget=8), tiny, turns)
    assert "call" in preempted
    assert cramped == roomy
    assert_a_call(tiny, cramped["call"])


def test_a_call_cut_short_leaves_no_matcher_and_the_next_turn_calls_afresh(tiny):
    engine, tokenizer = engine_of(tiny), tiny[2]
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    request = ThinkerRequest("s", 0.0, tokenizer.stop_ids, 1024)
    engine.submit_all([AddRequest(request),
                       AppendInput("s", TurnInput(prompt(tiny, "call"), sampling=greedy, constraint=FORCED))])
    while request.num_generated < 15:  # mid-call: '<tool_call>\n{"name": "...
        engine.step()
    engine.submit(StopGeneration("s", keep_tokens=len(prompt(tiny, "call"))))  # barge-in: what was heard
    engine.step()
    assert request.matcher is None and not request.is_generating
    engine.submit(AppendInput("s", TurnInput(prompt(tiny, "other"), sampling=greedy, constraint=FORCED)))
    tokens = []
    while not tokens or tokens[-1] not in tokenizer.stop_ids:
        tokens += [o.payload.token_id for o in engine.step() if o.payload is not None]
    assert_a_call(tiny, tokens)


@pytest.mark.parametrize("schema, error", [
    ('{"type": "object", "properties": {"when": {"type": "string", "format": "no-such"}}}', "does not compile"),
    ("{'name': 1}", "not JSON"),
])
def test_a_schema_that_does_not_compile_fails_its_turn_and_the_stage_serves_on(tiny, schema, error):
    engine, tokenizer = engine_of(tiny), tiny[2]
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    engine.submit_all([AddRequest(ThinkerRequest("s", 0.0, tokenizer.stop_ids, 1024)),
                       AppendInput("s", TurnInput(prompt(tiny, "call"), sampling=greedy,
                                                  constraint=ToolCallConstraint(schema)))])
    errors: list = []
    engine.emit = errors.extend
    engine.step()
    assert len(errors) == 1 and error in errors[0].error
    tokens, _ = run(engine, tiny, {"next": TurnInput(prompt(tiny, "call"), sampling=greedy, constraint=FORCED)})
    assert_a_call(tiny, tokens["next"])


def test_a_constrained_turn_must_generate_and_needs_a_stage_that_constrains(tiny):
    request = ThinkerRequest("s", 0.0, tiny[2].stop_ids, 1024)
    with pytest.raises(ValueError, match="does not constrain tool calls"):  # never attached to a stage's runner
        request.append(TurnInput([1, 2], sampling=SAMPLINGS[0], constraint=FORCED))
    engine_of(tiny).runner.attach(request)
    with pytest.raises(ValueError, match="must generate"):
        request.append(TurnInput([1, 2], constraint=FORCED))
    assert request.num_known == 0 and request.matcher is None
    request.append(TurnInput([1, 2], sampling=SAMPLINGS[0], constraint=FORCED))
    assert request.matcher is not None and request.matcher.is_constraining


def test_a_constrained_turn_and_its_request_travel_to_a_stage_process(tiny):
    request = pickle.loads(pickle.dumps(ThinkerRequest("s", 0.0, tiny[2].stop_ids, 1024)))  # as AddRequest does
    turn = pickle.loads(pickle.dumps(TurnInput(prompt(tiny, "call"), sampling=SAMPLINGS[0], constraint=AUTO)))
    assert turn.constraint == AUTO
    engine_of(tiny).runner.attach(request)
    request.append(turn)
    assert request.matcher.is_constraining
