"""The tool call scenes of the thinker on vLLM, run alike on vLLM (tool_call_scenes.py, in .venv-vllm) and on
the native engine: forced calls and auto turns, alone and beside an unconstrained request, greedy and sampled."""

from __future__ import annotations

from stages.commands import AddRequest, AppendInput
from stages.config import SamplingParams
from stages.requests.thinker import ThinkerRequest, TurnInput
from tests.stages.tool_call_schemas import AUTO, FORCED

MAX_TOKENS = 64  # a call takes 32-49 tokens
SAMPLINGS = {"greedy": SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)} | {
    f"t1-seed{seed}": SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=seed) for seed in (1,)}
BESIDE = ("greedy",)  # the samplings of the scenes with an unconstrained story
QUESTIONS = {"call": "What's the weather in Paris for the next three days?", "free": "Tell me a story."}


def prompt(tokenizer, name: str) -> list[int]:
    return tokenizer.encode(f"<|im_start|>user\n{QUESTIONS[name]}<|im_end|>\n<|im_start|>assistant\n")


def scenes(tokenizer) -> dict[str, dict[str, TurnInput]]:
    """Scene name -> its turns, each a request of its own: `forced/S` a forced call (each sampling S), and for
    the samplings BESIDE: `free/S` a story, `auto/S` the story under AUTO, `batch/S` the call beside the story."""
    calls = {name: TurnInput(prompt(tokenizer, "call"), sampling=s, constraint=FORCED) for name, s in SAMPLINGS.items()}
    out = {f"forced/{name}": {"call": call} for name, call in calls.items()}
    for name in BESIDE:
        free = TurnInput(prompt(tokenizer, "free"), sampling=SAMPLINGS[name])
        auto = TurnInput(free.token_ids, sampling=SAMPLINGS[name], constraint=AUTO)
        out |= {f"free/{name}": {"free": free}, f"auto/{name}": {"free": auto},
                f"batch/{name}": {"call": calls[name], "free": free}}
    return out


def run(engine, stop_ids: frozenset[int], turns: dict[str, TurnInput]) -> dict[str, list[int]]:
    """The turns together on `engine` (a native StageEngine or a VllmThinkerEngine, stepped on this thread):
    the tokens each generated."""
    engine.submit_all([command for i, (rid, turn) in enumerate(turns.items()) for command in (
        AddRequest(ThinkerRequest(rid, float(i), stop_ids, 1024)), AppendInput(rid, turn, close=True))])
    tokens: dict[str, list[int]] = {rid: [] for rid in turns}
    finished: set[str] = set()
    while len(finished) < len(turns):
        for output in engine.step():
            assert output.error is None, output.error
            if output.payload is not None:
                tokens[output.request_id].append(output.payload.token_id)
            if output.is_finished:
                finished.add(output.request_id)
    return tokens
