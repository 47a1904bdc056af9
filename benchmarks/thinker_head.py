"""voice-cpu's thinker with its output head's first pass on 4-bit groups against bfloat16, back to back in one
process: greedy replies (the tokens each pair shares before they part) and decode-step times at 1 and 3 rows.

    python benchmarks/thinker_head.py [--rounds 2] [--tokens 40] [--out benchmarks/results/thinker_head.json]

Both passes only pick the logits the head then computes exactly in float32 (OutputHead), so the replies part
only where the two first passes disagree on those candidates. One thread, as voice-cpu's thinker runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from kvtier import KVCacheManager, KVPoolConfig  # noqa: E402
from liveserve.config.loader import load_config  # noqa: E402
from stages.commands import AddRequest, AppendInput  # noqa: E402
from stages.config import SamplingParams, SchedulerConfig  # noqa: E402
from stages.engine import StageEngine  # noqa: E402
from stages.factory import build_model, runner_of, thinker_text  # noqa: E402
from stages.requests.thinker import ThinkerRequest, TurnInput  # noqa: E402
from stages.scheduler import Scheduler  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "thinker_head.json"
QUESTIONS = ("What is the capital of France?", "How many legs does a spider have?",
             "Tell me a short story about a dog.", "Why is the sky blue?", "What is two plus two?",
             "Name three colors of the rainbow.", "What is the tallest mountain in the world?",
             "Give me a tip for sleeping better.")
WARM_STEPS = 2  # the first steps of a run (prefill, first decode) are not timed


def replies(spec, model, tokenizer, questions: tuple[str, ...], tokens: int) -> tuple[list[list[int]], list[float]]:
    """Greedy replies of `tokens` tokens to `questions`, decoded together, and each step's seconds."""
    decoder = spec.model
    kv = KVCacheManager(KVPoolConfig(num_blocks=64 * len(questions), block_size=spec.kv.block_size,
                                     num_layers=decoder.num_layers, num_kv_heads=decoder.num_kv_heads,
                                     head_dim=decoder.head_dim))
    engine = StageEngine("thinker", Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4096), kv,
                                              time.monotonic), runner_of(spec, model, kv), lambda outputs: None)
    sampling = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    ids: dict[str, list[int]] = {}
    for i, question in enumerate(questions):
        prompt = tokenizer.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n")
        engine.submit_all([AddRequest(ThinkerRequest(f"r{i}", float(i), tokenizer.stop_ids, decoder.max_position)),
                           AppendInput(f"r{i}", TurnInput(prompt, sampling=sampling), close=True)])
        ids[f"r{i}"] = []
    steps = []
    while min(len(reply) for reply in ids.values()) < tokens:
        started = time.perf_counter()
        outputs = engine.step()
        steps.append(time.perf_counter() - started)
        for output in outputs:
            if output.payload is not None:
                ids[output.request_id].append(output.payload.token_id)
    return list(ids.values()), steps[WARM_STEPS:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = load_config("voice-cpu").pipeline.thinker
    model, tokenizer = build_model(spec), thinker_text(spec)[0]
    groups = model.lm_head.int4_weight
    if groups is None:
        raise SystemExit("the thinker's head has no 4-bit groups on this CPU (no int4 kernel)")
    figures: dict[str, dict] = {}
    for _ in range(args.rounds):
        for first_pass in ("bfloat16", "int4"):
            model.lm_head.int4_weight = groups if first_pass == "int4" else None
            alone = [replies(spec, model, tokenizer, (question,), args.tokens) for question in QUESTIONS]
            three = replies(spec, model, tokenizer, QUESTIONS[:3], args.tokens)
            entry = figures.setdefault(first_pass, {"replies": [r[0][0] for r in alone], "step1": [], "step3": []})
            entry["step1"] += [s for _, steps in alone for s in steps]
            entry["step3"] += three[1]
    shared = [next((k for k, (a, b) in enumerate(zip(x, y)) if a != b), len(x))
              for x, y in zip(figures["bfloat16"]["replies"], figures["int4"]["replies"])]
    result = {"tokens_shared": shared, "tokens": args.tokens}
    for first_pass, entry in figures.items():
        result[first_pass] = {f"{rows}_row_step_p50_ms": round(statistics.median(entry[f"step{rows}"]) * 1e3, 2)
                              for rows in (1, 3)}
        print(f"{first_pass:>9} first pass: decode step p50 {result[first_pass]['1_row_step_p50_ms']} ms at 1 row, "
              f"{result[first_pass]['3_row_step_p50_ms']} ms at 3")
    print(f"tokens shared before the replies part (of {args.tokens}): {shared}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
