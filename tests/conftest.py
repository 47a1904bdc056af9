"""Shared fixtures: the shipped speech clips and a tiny pipeline that runs in milliseconds."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import resample_poly

from lab.clips import clips_dir

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
