"""A LiveServe server in a child process on a free loopback port, for benchmarks and tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from lab.prometheus import parse_metrics, sample_key
from liveserve.config.document import Override

HOST = "127.0.0.1"
LOOPBACK_URLS = ("ws://127.", "ws://localhost", "ws://[::1]")


class ServerStartError(RuntimeError):
    """The server exited or did not answer /health in time; the message carries its output."""


class ServerProcess:
    """`liveserve serve --config CONFIG [--set OVERRIDE ...]` on 127.0.0.1, ready (answering
    /health) once constructed.

    Use as a context manager or call `stop()`; the server's output is captured and
    included in the error if it fails to start.
    """

    def __init__(self, config: Path, overrides: Sequence[Override] = (), *, startup_timeout_s: float = 120.0,
                 log_level: str = "warning") -> None:
        self.port = _free_port()
        self.url = f"ws://{HOST}:{self.port}/v1/realtime"
        self._log = tempfile.TemporaryFile("w+")
        settings = [arg for override in overrides for arg in ("--set", str(override))]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "liveserve.cli", "serve", "--config", str(config), *settings, "--host", HOST,
             "--port", str(self.port), "--log-level", log_level],
            stdout=self._log, stderr=subprocess.STDOUT, text=True)
        try:
            self._wait_ready(startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(f"server exited with code {self.proc.returncode}:\n{self.output()}")
            try:
                self.get("/health")
                return
            except OSError:
                time.sleep(0.2)
        raise ServerStartError(f"server did not answer /health within {timeout_s} s:\n{self.output()}")

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"http://{HOST}:{self.port}{path}", timeout=5) as response:
            return response.read().decode()

    def metrics(self) -> dict[str, float]:
        """Every sample on /metrics by its name and labels, e.g. `liveserve_kv_blocks_used{stage="thinker"}`."""
        return parse_metrics(self.get("/metrics"))

    def metric(self, name: str, **labels: str) -> float:
        key = sample_key(name, labels)
        samples = self.metrics()
        if key not in samples:
            raise KeyError(key)
        return samples[key]

    def output(self) -> str:
        """What the server printed so far (not after `stop`)."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def stop(self) -> None:
        """Terminate (kill after 10 s); safe to call twice."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def is_loopback_url(url: str) -> bool:
    """Whether `url` is a ws:// address on this machine (the benchmarks talk to nothing else)."""
    return url.startswith(LOOPBACK_URLS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]
