"""Shared fixtures: the shipped speech clips and a tiny pipeline that runs in milliseconds."""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.signal import resample_poly

from lab.clips import clips_dir

if not torch.cuda.is_available():  # the Triton kernels' tests run in Triton's interpreter, on the CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

FIXTURES = clips_dir()


def read_fixture(name: str, rate: int = 16000) -> np.ndarray:
    """A fixture clip (24 kHz PCM16) as float32 at `rate`."""
    with wave.open(str(FIXTURES / name), "rb") as wav:
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2").astype(np.float32) / 32768.0
    return pcm if rate == 24000 else resample_poly(pcm, rate // 8000, 3).astype(np.float32)


@pytest.fixture(scope="session")
def speech_16k() -> np.ndarray:
    return read_fixture("q_capital_espeak_24k.wav")


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One realtime server on 127.0.0.1 (tiny-omni) that the server tests of every package share."""
    from tests.liveserve.realtime.realtime_harness import ServerProcess, small_config

    directory = tmp_path_factory.mktemp("server")
    process = ServerProcess(small_config(directory, runtime={"trace_dir": str(directory / "trace")}))
    process.trace_dir = directory / "trace"
    yield process
    process.stop()


@pytest.fixture
def triton_interpreter(monkeypatch):
    """Two gaps in Triton 3.6's interpreter, closed for the tests that use this fixture: it takes a loop bound
    with int() of a one-element array, which numpy 2.4 refuses (triton-lang/triton#9171), and the kernels loop
    up to lengths they load; its tl.dot multiplies bfloat16 tiles as their uint16 bits (#11584), where a GPU
    multiplies their values."""
    triton = pytest.importorskip("triton")
    from triton.runtime import interpreter

    patch_tensor, dot, tl = interpreter._patch_lang_tensor, interpreter.InterpreterBuilder.create_dot, triton.language

    def patched_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    def widened_dot(builder, a, b, *rest):
        a, b = (builder.cast_impl(x, tl.float32) if x.dtype == tl.bfloat16 else x for x in (a, b))
        return dot(builder, a, b, *rest)

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patched_tensor)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", widened_dot)
