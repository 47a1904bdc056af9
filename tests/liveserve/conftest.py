"""The session-wide server the realtime tests share."""

from __future__ import annotations

import pytest

from realtime_harness import ServerProcess, small_config


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> ServerProcess:
    directory = tmp_path_factory.mktemp("server")
    process = ServerProcess(small_config(directory, runtime={"trace_dir": str(directory / "trace")}))
    process.trace_dir = directory / "trace"
    yield process
    process.stop()
