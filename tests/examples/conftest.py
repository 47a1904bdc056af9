"""One server for the framework examples: the embedded default (`liveserve serve` with no --config, the voice
agent: Whisper tiny.en, SmolLM2-135M-Instruct, Piper), replies of at most 16 tokens so each example's turns
take seconds."""

from __future__ import annotations

import pytest

from lab.server_process import ServerProcess
from liveserve.config.document import Override
from liveserve.config.loader import resolve_config_path


@pytest.fixture(scope="module")
def example_server() -> ServerProcess:
    with ServerProcess(resolve_config_path(None), [Override.parse("stages.thinker.sampling.max_tokens=16")]) as server:
        yield server
