"""What tapping the talker's hidden states costs the Qwen3-Omni thinker on vLLM: decode throughput of the same
engine with the tap (vLLM's `extract_hidden_states` speculative method and LiveServe's HiddenStateTap connector,
as `backend: vllm` runs it) and without it (the same model, no speculative method, no connector).

vLLM 0.32's LLMEngine runs in a process of its own per engine (vLLM's KV connector is global to a process), the
untapped one first, with LiveServe's engine arguments (`vllm_api`: block size 32, enforce_eager; prefix caching
off, so that every run computes its prompts). For each batch size B, B requests of --prompt random token ids
generate --tokens tokens each (greedy, ignore_eos), all added before the first step. Decode tok/s is the tokens
after each request's first, over the time from the step after the last prefill to the last step; tokens per
step is what a decode step gives a request (above 1 where the tap's draft, the sampled token again, is
accepted: the model repeated a token). The greedy tokens of both engines are compared. Run from the repository
root, on a Qwen3-Omni folder whose thinker vLLM's CPU attention runs (head_dim >= 32, e.g. tiny-d:
`liveserve tiny-qwen3-omni DIR --shape tiny-d --seed 0`); results also in --out:

    .venv-vllm/bin/python benchmarks/vllm_qwen3_tap.py --folder ~/.cache/liveserve/qwen3-omni-tiny-d
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stages.config import SamplingParams, SchedulerConfig  # noqa: E402
from stages.models.qwen3_omni.config import Qwen3OmniConfig  # noqa: E402
from stages.vllm_backend import vllm_api  # noqa: E402
from stages.vllm_backend.args import VllmArgs  # noqa: E402


def build(folder: Path, tapped: bool, max_seqs: int):
    """The thinker's engine, with the tap at the folder's accept_hidden_layer or without any."""
    from vllm.v1.engine.llm_engine import LLMEngine

    from stages.vllm_backend.qwen3_omni_thinker import register, thinker_text_config

    os.environ.update(vllm_api.IN_PROCESS_ENV)
    register()
    args = VllmArgs(kv_cache_mib=256, enable_prefix_caching=False)
    budgets = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=4096)
    layer = Qwen3OmniConfig.from_folder(folder).talker.accept_hidden_layer
    built = vllm_api.engine_args(folder, args, budgets, 0, layer)
    if not tapped:
        built.speculative_config, built.kv_transfer_config = None, None
        built.hf_overrides = thinker_text_config
    return LLMEngine.from_engine_args(built, enable_multiprocessing=False)


def decode_rate(engine, batch: int, prompt: int, tokens: int, seed: int) -> tuple[float, float, list[list[int]]]:
    """Decode tok/s, tokens a request gets from a decode step, and the tokens generated."""
    rng = random.Random(seed)
    greedy = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    for i in range(batch):
        vllm_api.add(engine, f"r{i}", [rng.randrange(100, 400) for _ in range(prompt)], greedy, (), f"r{i}")
    generated: dict[str, list[int]] = {f"r{i}": [] for i in range(batch)}
    started, decode_steps = None, 0
    while vllm_api.has_work(engine):
        for out in vllm_api.step(engine):
            generated[out.request_id] += out.token_ids
        decode_steps += started is not None
        if started is None and all(generated.values()):
            started = time.perf_counter()
    elapsed = time.perf_counter() - started
    return batch * (tokens - 1) / elapsed, (tokens - 1) / decode_steps, list(generated.values())


def measure(folder: Path, tapped: bool, batches: list[int], prompt: int, tokens: int) -> dict:
    """One engine's rates and tokens per batch size (an engine a process: vLLM's KV connector is global)."""
    engine = build(folder, tapped, max(batches))
    rates = {batch: decode_rate(engine, batch, prompt, tokens, batch) for batch in batches}
    return {str(batch): {"tok_s": rate, "tokens_per_step": per_step, "tokens": generated}
            for batch, (rate, per_step, generated) in rates.items()}


def in_subprocess(args: argparse.Namespace, tapped: bool) -> dict:
    command = [sys.executable, __file__, "--folder", str(args.folder), "--prompt", str(args.prompt),
               "--tokens", str(args.tokens), "--batches", *map(str, args.batches), "--variant",
               "tapped" if tapped else "untapped"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--variant", choices=("tapped", "untapped"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/vllm_qwen3_tap.json"))
    args = parser.parse_args()
    args.folder = args.folder.expanduser()
    if args.variant is not None:
        print(json.dumps(measure(args.folder, args.variant == "tapped", args.batches, args.prompt, args.tokens)))
        return
    untapped, tapped = (in_subprocess(args, variant) for variant in (False, True))
    rows = []
    for batch in map(str, args.batches):
        rows.append({"batch": int(batch), "decode_tok_s_untapped": round(untapped[batch]["tok_s"], 1),
                     "decode_tok_s_tapped": round(tapped[batch]["tok_s"], 1),
                     "tapped_over_untapped": round(tapped[batch]["tok_s"] / untapped[batch]["tok_s"], 3),
                     "tokens_per_step_tapped": round(tapped[batch]["tokens_per_step"], 2),
                     "same_tokens": tapped[batch]["tokens"] == untapped[batch]["tokens"]})
        print(json.dumps(rows[-1]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"folder": str(args.folder), "prompt": args.prompt, "tokens": args.tokens,
                                    "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
