"""The session-wide server the realtime tests share."""

from __future__ import annotations

import pytest

from realtime_harness import ServerProcess, small_config


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> ServerProcess:
    process = ServerProcess(small_config(tmp_path_factory.mktemp("server")))
    yield process
    process.stop()
