"""Runs a scenes script in .venv-vllm's Python (vLLM is not in the test venv) and returns what it printed:
one JSON line, the last."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from liveserve.config.vllm import default_python

ROOT = Path(__file__).resolve().parents[3]


def run_scenes(script: Path, *args: str) -> dict:
    python = default_python()
    assert python.is_file(), f"no vLLM interpreter at {python}: run `make install`"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(python), str(script), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
