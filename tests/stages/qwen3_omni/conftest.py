"""One tiny reference model per shape for the whole session, saved as a model folder."""

import pytest

from tests.stages.qwen3_omni.tiny_reference import SHAPES, build_tiny_omni


@pytest.fixture(scope="session", params=sorted(SHAPES))
def tiny(request, tmp_path_factory):
    return build_tiny_omni(request.param, tmp_path_factory.mktemp(f"qwen3_omni_{request.param}"))
