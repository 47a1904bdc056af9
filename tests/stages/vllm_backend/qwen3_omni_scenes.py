"""In .venv-vllm's Python: the Qwen3-Omni scenario (qwen3_omni_scenario.py) on the thinker on vLLM, the stage
spec pickled at argv[1] (qwen3-omni-tiny-cpu-vllm's, read where the configs are installed) over the folder
argv[2]; the recording is saved to argv[3]."""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

import torch

from stages.factory import build_engine
from tests.stages.vllm_backend.qwen3_omni_scenario import converse


def main(spec: str, folder: str, out: str) -> None:
    outputs: list = []
    with open(spec, "rb") as file:
        engine = build_engine(pickle.load(file), outputs.extend, time.monotonic)

    def next_output():
        while not outputs:
            outputs.extend(engine.step())
        return outputs.pop(0)

    torch.save(converse(Path(folder), engine.submit_all, next_output), out)
    print(json.dumps({"saved": out}))


if __name__ == "__main__":
    main(*sys.argv[1:])
