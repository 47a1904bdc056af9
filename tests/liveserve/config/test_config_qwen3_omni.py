"""A Qwen3-Omni folder in a config: every stage's model from its config.json, or from the declared sizes where the
folder is not on this machine (to plan); what cannot run is one ConfigError naming the field."""

import pytest

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from liveserve.config.document import Override
from liveserve.config.loader import check_checkpoints, load_config
from liveserve.config.reader import ConfigError
from liveserve.plan_command import plan_command
from stages.kinds import StageKind


@pytest.fixture(scope="module")
def tiny_a(tmp_path_factory):
    return write_tiny_folder(tmp_path_factory.mktemp("tiny-a"), SHAPES["tiny-a"], 0)


def load(*sets):
    return load_config("qwen3-omni-tiny-cpu", [Override.parse(s) for s in sets])


def test_the_shipped_tiny_config_declares_the_tiny_a_folder_it_is_for(tiny_a):
    config = load(f"model.folder={tiny_a}")
    check_checkpoints(config)
    assert {spec.kind for spec in config.pipeline.stages} == set(StageKind) - {StageKind.ASR, StageKind.TTS}
    assert all(spec.folder == tiny_a for spec in config.pipeline.stages)


def test_a_folder_of_another_shape_runs_as_its_config_json_says(tmp_path):
    folder = write_tiny_folder(tmp_path / "b", SHAPES["tiny-b"], 0)
    assert load(f"model.folder={folder}").pipeline.thinker.model.thinker.num_layers == SHAPES["tiny-b"].thinker_layers


def test_without_the_folder_the_plan_sizes_from_the_declared_config(tmp_path):
    table = plan_command("qwen3-omni-h200", [Override.parse(f"model.folder={tmp_path / 'absent'}")], None)
    assert "thinker[0]" in table and "61.1 GB" in table  # Qwen3-Omni-30B-A3B's thinker in bfloat16
    config = load_config("qwen3-omni-h200", [Override.parse(f"model.folder={tmp_path / 'absent'}")])
    with pytest.raises(ConfigError, match="model.folder: no folder at"):
        check_checkpoints(config)


def test_nothing_to_size_with_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="model.folder: no folder at"):
        load(f"model.folder={tmp_path / 'absent'}", "model.declared=null")


def test_a_stage_section_beside_the_folder_is_refused(tiny_a):
    with pytest.raises(ConfigError, match="model.thinker: a Qwen3-Omni folder's config.json gives every stage's model"):
        load(f"model.folder={tiny_a}", "model.thinker.hidden_size=64")


def test_the_thinker_may_run_on_vllm_beside_the_native_talker(tmp_path):
    absent = f"model.folder={tmp_path / 'absent'}"
    config = load_config("qwen3-omni-tiny-cpu-vllm", [Override.parse(absent)])
    backends = {spec.kind: spec.backend for spec in config.pipeline.stages}
    assert backends == {"encoder": "native", "thinker": "vllm", "talker": "native", "vocoder": "native"}
    assert config.pipeline.thinker.model.thinker.head_dim == 32  # tiny-d's, declared over tiny-a's
    narrow = "model.declared.thinker_config.text_config.head_dim=16"
    with pytest.raises(ConfigError, match="stages.thinker: backend: vLLM's CPU attention takes .* head_dim 16"):
        load_config("qwen3-omni-tiny-cpu-vllm", [Override.parse(absent), Override.parse(narrow)])


def test_on_gpus_the_thinkers_hidden_state_tap_leaves_no_connector_for_kv_offload(tmp_path):
    sets = [f"model.folder={tmp_path / 'absent'}", "stages.thinker.backend=vllm",
            "stages.thinker.kv={eviction: next_use, host_mib: 4096}"]
    with pytest.raises(ConfigError, match="stages.thinker.kv: vLLM takes one KV connector"):
        load_config("qwen3-omni-h200", [Override.parse(s) for s in sets])
    config = load_config("qwen3-omni-h200", [Override.parse(s) for s in sets[:2] + ["stages.thinker.kv=null"]])
    assert config.pipeline.thinker.vllm.gpu_memory_utilization == 0.72
