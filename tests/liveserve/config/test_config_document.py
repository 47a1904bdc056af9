"""Config documents: `base:` inheritance, `--set` overrides, and shipped configs found by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from liveserve.config.document import Override, apply_overrides
from liveserve.config.loader import (
    LAB_CONFIG,
    default_config_path,
    lab_config_path,
    load_config,
    read_config_data,
    shipped_configs,
)
from liveserve.config.reader import ConfigError


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_an_override_sets_one_key_and_its_value_is_read_as_yaml():
    data = {"stages": {"thinker": {"kv": {"num_blocks": 2048}}}}
    derived = apply_overrides(data, [Override.parse("stages.thinker.kv.num_blocks=256"),
                                     Override.parse("stages.thinker.window={tokens: 64, sinks: 4}"),
                                     Override.parse("server.port=null")])
    assert derived == {"stages": {"thinker": {"kv": {"num_blocks": 256}, "window": {"tokens": 64, "sinks": 4}}},
                       "server": {"port": None}}  # missing mappings are created
    assert data["stages"]["thinker"]["kv"]["num_blocks"] == 2048  # the input is not modified


@pytest.mark.parametrize("text, message", [
    ("stages.thinker", "expected KEY.PATH=VALUE"),
    ("stages..kv=1", "expected KEY.PATH=VALUE"),
    ("=1", "expected KEY.PATH=VALUE"),
    ("a.b=[1, 2", "the value is not YAML"),
])
def test_a_malformed_override_is_named(text, message):
    with pytest.raises(ConfigError, match=message):
        Override.parse(text)


def test_an_override_through_a_value_that_is_not_a_mapping_is_named():
    with pytest.raises(ConfigError, match=r"--set server.port.x: server.port is not a mapping \(it is 8000\)"):
        apply_overrides({"server": {"port": 8000}}, [Override.parse("server.port.x=1")])


def test_overridden_values_are_validated_like_the_file_and_named_by_their_key():
    config = load_config(LAB_CONFIG, [Override.parse("stages.thinker.kv.num_blocks=256")])
    assert config.pipeline.thinker.kv.num_blocks == 256
    with pytest.raises(ConfigError, match=r"stages.thinker.kv.num_blockz: unknown field \(did you mean 'num_blocks'\?\)"):
        load_config(LAB_CONFIG, [Override.parse("stages.thinker.kv.num_blockz=256")])
    with pytest.raises(ConfigError, match="stages.thinker.kv: num_blocks must be a positive integer"):
        load_config(LAB_CONFIG, [Override.parse("stages.thinker.kv.num_blocks=0")])


def test_a_config_names_its_base_and_says_only_how_it_differs(tmp_path):
    child = write(tmp_path / "small.yaml", "base: tiny-omni-cpu\nstages: {thinker: {kv: {num_blocks: 128}}}\n")
    grandchild = write(tmp_path / "smaller.yaml", "base: small.yaml\nserver: {max_sessions: 4}\n")
    config, default = load_config(grandchild), load_config(LAB_CONFIG)
    assert config.pipeline.thinker.kv.num_blocks == 128  # from the child
    assert config.server.max_sessions == 4  # from the grandchild
    # everything else is the base's, mappings merged key by key
    assert config.pipeline.thinker.kv.block_size == default.pipeline.thinker.kv.block_size
    assert config.pipeline.thinker.scheduler == default.pipeline.thinker.scheduler
    assert config.pipeline.talker == default.pipeline.talker


def test_base_errors_name_the_file(tmp_path):
    missing = write(tmp_path / "a.yaml", "base: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"config file not found: .*nowhere.yaml \(shipped configs, by name: "):
        read_config_data(missing)
    loop = write(tmp_path / "loop.yaml", "base: loop.yaml\n")
    with pytest.raises(ConfigError, match="more than 8 configs deep"):
        read_config_data(loop)
    bad = write(tmp_path / "bad.yaml", "base: 3\n")
    with pytest.raises(ConfigError, match="base: expected a config name or path, got 3"):
        read_config_data(bad)


def test_shipped_configs_are_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_config_path() == shipped_configs()["voice-cpu"] == Path(load_config(None).source)
    assert lab_config_path() == shipped_configs()["tiny-omni-cpu"]
    for name in shipped_configs():
        assert load_config(name).source == str(shipped_configs()[name])
    with pytest.raises(ConfigError, match="config file not found: nope.yaml"):
        load_config("nope.yaml")


def test_a_trace_dir_gives_every_stage_its_trace_file(tmp_path):
    config = load_config(LAB_CONFIG, [Override.parse(f"runtime.trace_dir={tmp_path}")])
    assert [spec.trace_path for spec in config.pipeline.stages] == [
        tmp_path / f"{kind}.jsonl" for kind in ("encoder", "thinker", "talker", "vocoder")]
    assert all(spec.trace_path is None for spec in load_config(LAB_CONFIG).pipeline.stages)
