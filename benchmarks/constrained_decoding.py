"""What constraining a tool call costs the native thinker: decode tok/s of replies constrained to a tool call
(ToolCallConstraint, forced; the stage's ConstraintCompiler and per-request matchers, as a served stage runs
them) against the same replies unconstrained, on tiny-omni's thinker (random weights, 8k vocabulary) and on
the embedded default's SmolLM2-135M-Instruct (voice-cpu, 49k vocabulary). The bar (issue 49): constrained tok/s
at least unconstrained / 1.5.

For each model and batch size B, B requests (the same chat prompt, a different question each) generate
--tokens tokens each through the stage engine (fcfs scheduler, the config's torch threads; ignore_eos, so
every reply has the same length: a call that ends early goes on with its stop token, which is masked too).
The schema is a weather tool with an enum, a bounded integer, a nested object and a free text field, so a
call spends most of its tokens inside a JSON string, the costliest place to mask. t1 = time until every
request has its first token, t2 = until every request has all; decode tok/s = B * (tokens - 1) / (t2 - t1),
the median of --repeats runs after one warm-up. Run from the repository root:

    .venv/bin/python benchmarks/constrained_decoding.py            # writes benchmarks/results/constrained_decoding.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvtier import KVCacheManager, KVPoolConfig  # noqa: E402
from liveserve.config.loader import load_config  # noqa: E402
from liveserve.runtime import configure_torch  # noqa: E402
from stages.commands import AddRequest, AppendInput  # noqa: E402
from stages.config import SamplingParams, SchedulerConfig  # noqa: E402
from stages.engine import StageEngine  # noqa: E402
from stages.factory import build_model, runner_of, thinker_text  # noqa: E402
from stages.requests.thinker import ThinkerRequest, TurnInput  # noqa: E402
from stages.requests.tool_call import ToolCallConstraint  # noqa: E402
from stages.scheduler import Scheduler  # noqa: E402

MODELS = {"tiny-omni": "tiny-omni-cpu", "smollm2-135m": "voice-cpu"}
BAR = 1.5
SCHEMA = {"type": "object", "properties": {
    "name": {"const": "get_weather"},
    "arguments": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "New York", "Tokyo"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "units": {"type": "object", "properties": {"temperature": {"enum": ["celsius", "fahrenheit"]}},
                  "required": ["temperature"]},
        "note": {"type": "string"},
    }, "required": ["city", "days", "units", "note"]},
}, "required": ["name", "arguments"]}
CONSTRAINT = ToolCallConstraint(json.dumps(SCHEMA))
SYSTEM = ("You can call get_weather. Answer with <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {...}}\n"
          "</tool_call>.")
CITIES = ("Paris", "Rome", "New York", "Tokyo")


def prompts(tokenizer, batch: int) -> list[list[int]]:
    return [tokenizer.encode(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nWhat's the weather in "
                             f"{CITIES[i % 4]} for the next {i + 2} days?<|im_end|>\n<|im_start|>assistant\n")
            for i in range(batch)]


def timed_run(spec, model, tokenizer, batch: int, tokens: int, constrained: bool) -> tuple[float, float]:
    """Seconds until every request has its first token, and until every request has `tokens`."""
    decoder = spec.model
    kv = KVCacheManager(KVPoolConfig(num_blocks=batch * (512 // spec.kv.block_size), block_size=spec.kv.block_size,
                                     num_layers=decoder.num_layers, num_kv_heads=decoder.num_kv_heads,
                                     head_dim=decoder.head_dim))
    engine = StageEngine("thinker", Scheduler(SchedulerConfig(max_num_seqs=batch, max_num_batched_tokens=4096), kv,
                                              time.monotonic), runner_of(spec, model, kv), lambda outputs: None)
    sampling = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    counts = {}
    for i, prompt in enumerate(prompts(tokenizer, batch)):
        turn = TurnInput(prompt, sampling=sampling, constraint=CONSTRAINT if constrained else None)
        engine.submit_all([AddRequest(ThinkerRequest(f"r{i}", float(i), tokenizer.stop_ids, decoder.max_position)),
                           AppendInput(f"r{i}", turn, close=True)])
        counts[f"r{i}"] = 0
    started, first = time.perf_counter(), None
    while min(counts.values()) < tokens:
        for output in engine.step():
            assert output.error is None, output.error
            if output.payload is not None:
                counts[output.request_id] += 1
        if first is None and min(counts.values()) >= 1:
            first = time.perf_counter() - started
    return first, time.perf_counter() - started


def decode_rate(spec, model, tokenizer, batch: int, tokens: int, constrained: bool, repeats: int) -> float:
    timed_run(spec, model, tokenizer, batch, tokens, constrained)  # warm-up
    runs = [timed_run(spec, model, tokenizer, batch, tokens, constrained) for _ in range(repeats)]
    return round(statistics.median(batch * (tokens - 1) / (t2 - t1) for t1, t2 in runs), 1)


def sample_call(spec, model, tokenizer) -> str:
    """One greedy constrained reply (what the figures decode), for the record."""
    engine_kv = KVCacheManager(KVPoolConfig(num_blocks=64, block_size=spec.kv.block_size,
                                            num_layers=spec.model.num_layers, num_kv_heads=spec.model.num_kv_heads,
                                            head_dim=spec.model.head_dim))
    engine = StageEngine("thinker", Scheduler(SchedulerConfig(), engine_kv, time.monotonic),
                         runner_of(spec, model, engine_kv), lambda outputs: None)
    turn = TurnInput(prompts(tokenizer, 1)[0], sampling=SamplingParams(temperature=0.0, max_tokens=120),
                     constraint=CONSTRAINT)
    engine.submit_all([AddRequest(ThinkerRequest("r", 0.0, tokenizer.stop_ids, spec.model.max_position)),
                       AppendInput("r", turn, close=True)])
    ids = []
    while not ids or ids[-1][1] is None:
        ids += [(o.payload.token_id, o.payload.finish_reason) for o in engine.step() if o.payload is not None]
    return tokenizer.decode([i for i, _ in ids]) + f" [{ids[-1][1]}]"


def measure(name: str, batches: list[int], tokens: int, repeats: int) -> dict:
    config = load_config(MODELS[name])
    configure_torch(config.runtime)
    spec = config.pipeline.thinker
    model, tokenizer = build_model(spec), thinker_text(spec)[0]
    rows = {}
    for batch in batches:
        free = decode_rate(spec, model, tokenizer, batch, tokens, False, repeats)
        constrained = decode_rate(spec, model, tokenizer, batch, tokens, True, repeats)
        rows[str(batch)] = {"unconstrained_tok_s": free, "constrained_tok_s": constrained,
                            "cost": round(free / constrained, 3), "meets_bar": free / constrained <= BAR}
        print(f"{name:>13} B={batch:<2} unconstrained {free:8.1f} tok/s  constrained {constrained:8.1f} tok/s  "
              f"cost {free / constrained:.2f}x", flush=True)
    return {"vocab_size": tokenizer.vocab_size, "torch_threads": config.runtime.torch_threads,
            "sample_call": sample_call(spec, model, tokenizer), "batches": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "constrained_decoding.json")
    parser.add_argument("--tokens", type=int, default=64, help="reply length (tokens) of every request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    args = parser.parse_args()
    result = {"tokens": args.tokens, "repeats": args.repeats, "bar": BAR, "schema": SCHEMA,
              "models": {name: measure(name, args.batches, args.tokens, args.repeats) for name in args.models}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
