"""One server for the framework examples: the lab's config (tiny-omni-cpu), a small thinker, replies of at
most 12 tokens (2.9 s of audio), so each example's turns take seconds."""

from __future__ import annotations

import pytest

from liveserve.bench.server_process import ServerProcess
from liveserve.config_document import Override
from tests.liveserve.realtime_harness import small_config


@pytest.fixture(scope="module")
def example_server(tmp_path_factory) -> ServerProcess:
    config = small_config(tmp_path_factory.mktemp("examples"))
    with ServerProcess(config, [Override.parse("stages.thinker.sampling.max_tokens=12")]) as server:
        yield server
