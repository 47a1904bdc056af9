"""`stages.<kind>.window` in YAML: read for thinker and talker, validated, with or without a host KV tier."""

from __future__ import annotations

import pytest

from liveserve.config.loader import LAB_CONFIG, load_config
from liveserve.config.reader import ConfigError
from stages.config import WindowSpec
from tests.liveserve.config.config_variant import write_variant


def test_window_is_read_for_thinker_and_talker_and_defaults_to_unbounded(tmp_path):
    def edit(data):
        data["stages"]["thinker"]["window"] = {"tokens": 256, "sinks": 16}
        data["stages"]["talker"]["window"] = None  # null: unbounded
    pipeline = load_config(write_variant(tmp_path, edit)).pipeline
    assert pipeline.thinker.window == WindowSpec(tokens=256, sinks=16)
    assert pipeline.talker.window is None
    assert load_config(LAB_CONFIG).pipeline.thinker.window is None
    sinkless = load_config(write_variant(tmp_path, lambda d: d["stages"]["talker"].update(window={"tokens": 64})))
    assert sinkless.pipeline.talker.window == WindowSpec(tokens=64, sinks=0)


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ({"tokens": 0}, r"stages\.thinker\.window: tokens must be a positive integer, got 0"),
        ({"tokens": 8, "sinks": -1}, r"stages\.thinker\.window: sinks must be an integer >= 0, got -1"),
        ({"sinks": 4}, r"stages\.thinker\.window\.tokens: required"),
        ({"tokens": 8, "sink": 4}, r"stages\.thinker\.window\.sink: unknown field \(did you mean 'sinks'\?\)"),
        ({"tokens": "many"}, r"stages\.thinker\.window\.tokens: expected int"),
        ({"tokens": 40000}, r"stages\.thinker: window: sinks 0 \+ tokens 40000 \+ a chunk .* need 2533 KV blocks; "
                            r"kv\.num_blocks is 2048"),
        ({"tokens": 8, "history": "lstm"}, r"stages\.thinker\.window: history must be one of ssm or null, got 'lstm'"),
    ],
)
def test_window_mistakes_name_the_field(tmp_path, window, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_variant(tmp_path, lambda d: d["stages"]["thinker"].update(window=window)))


def test_a_window_combines_with_a_host_kv_tier(tmp_path):
    def edit(data):
        data["stages"]["thinker"]["window"] = {"tokens": 256}
        data["stages"]["thinker"]["kv"]["eviction"] = "next_use"
    thinker = load_config(write_variant(tmp_path, edit)).pipeline.thinker
    assert thinker.window == WindowSpec(tokens=256) and thinker.kv.eviction == "next_use"


@pytest.mark.parametrize("kind", ["encoder", "vocoder"])
def test_window_is_unknown_for_stages_without_kv(tmp_path, kind):
    with pytest.raises(ConfigError, match=rf"stages\.{kind}\.window: unknown field"):
        load_config(write_variant(tmp_path, lambda d: d["stages"][kind].update(window={"tokens": 8})))


def test_a_history_branch_is_read_and_is_the_thinkers_only(tmp_path):
    thinker = load_config(write_variant(tmp_path, lambda d: d["stages"]["thinker"].update(
        window={"tokens": 256, "sinks": 4, "history": "ssm"}))).pipeline.thinker
    assert thinker.window == WindowSpec(tokens=256, sinks=4, history="ssm")
    with pytest.raises(ConfigError, match=r"stages\.talker: window\.history: a history branch is built for the "
                                          r"thinker, not the talker$"):
        load_config(write_variant(tmp_path, lambda d: d["stages"]["talker"].update(
            window={"tokens": 64, "history": "ssm"})))
