"""benchmarks/server_loop_probe/: a real server started with the probe writes a line a second of what its event
loop did, counting the audio it read and the VAD batches that scored it."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import numpy as np

from tests.liveserve.realtime.realtime_harness import Client, ServerProcess, connect, small_config

PROBE_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "server_loop_probe"


def test_a_probed_server_writes_its_loops_seconds(tmp_path, monkeypatch):
    probe = tmp_path / "loop.jsonl"
    monkeypatch.setenv("LIVESERVE_LOOP_PROBE", str(probe))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PROBE_DIR), os.environ.get("PYTHONPATH", "")]))
    server = ServerProcess(small_config(tmp_path))

    async def speak() -> None:
        async with connect(server) as ws:
            await Client(ws).append(np.zeros(24000 * 3, np.int16))  # 3 s of silence, 150 appends in real time

    try:
        asyncio.run(speak())
    finally:
        server.stop()
    seconds = [json.loads(line) for line in probe.read_text().splitlines()]
    assert len(seconds) >= 3
    assert all(0 <= s["idle"] <= s["wall"] for s in seconds)
    assert sum(s["messages"] for s in seconds) >= 100  # the seconds closed before the server stopped
    assert sum(s["vad_windows"] for s in seconds) > 0 and sum(s["vad_s"] for s in seconds) > 0
