"""In .venv-vllm's Python: the tool call scenes (tool_call_scenario.py) on the thinker on vLLM, its stage spec
pickled at argv[1]; prints {scene: {request: tokens}, "seconds": {scene: wall seconds}} as one JSON line."""

from __future__ import annotations

import json
import pickle
import sys
import time

from stages.factory import build_engine, thinker_text
from tests.stages.vllm_backend.tool_call_scenario import run, scenes


def main(spec_path: str) -> None:
    with open(spec_path, "rb") as file:
        spec = pickle.load(file)
    engine = build_engine(spec, lambda outputs: None, time.monotonic)
    tokenizer = thinker_text(spec)[0]
    results, seconds = {}, {}
    for name, turns in scenes(tokenizer).items():
        started = time.perf_counter()
        results[name] = run(engine, tokenizer.stop_ids, turns)
        seconds[name] = time.perf_counter() - started
    print(json.dumps(results | {"seconds": seconds}))


if __name__ == "__main__":
    main(*sys.argv[1:])
