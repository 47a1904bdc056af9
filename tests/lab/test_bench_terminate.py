"""A benchmark stopped by SIGTERM (a timeout, a cancelled job) stops the fresh server it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.liveserve.realtime.realtime_harness import small_config


def children(pid: int) -> list[int]:
    """The processes `pid`'s threads started (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def is_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(predicate, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s")


def test_a_terminated_replay_stops_its_fresh_server(tmp_path):
    replay = subprocess.Popen(
        [sys.executable, "-m", "liveserve.cli", "bench", "replay", "--config", str(small_config(tmp_path)),
         "--num-requests", "200", "--random-input-len", "12", "--random-output-len", "60", "--max-concurrency", "1",
         "--hold-until-heard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = None
    try:
        server = wait_for(lambda: children(replay.pid), timeout_s=60)[0]
        wait_for(lambda: b"liveserve.cli\x00serve" in Path(f"/proc/{server}/cmdline").read_bytes(), timeout_s=10)
        time.sleep(2.0)  # the server starting up or serving: either way it must go
        replay.send_signal(signal.SIGTERM)
        assert replay.wait(timeout=30) == 128 + signal.SIGTERM
        wait_for(lambda: not is_alive(server), timeout_s=30)
    finally:
        if replay.poll() is None:
            replay.kill()
        if server is not None and is_alive(server):
            os.kill(server, signal.SIGKILL)
