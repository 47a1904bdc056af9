"""The server a benchmark measures: a fresh one from a config with overrides, or a running one; /metrics read."""

from __future__ import annotations

import pytest

from lab.prometheus import label_values, parse_metrics, sample_key, split_key, total
from lab.server_target import ServedConfig, metrics_url, open_target
from liveserve.config.document import Override
from liveserve.config.reader import ConfigError
from tests.liveserve.realtime.realtime_harness import small_config

TEXT = """\
# TYPE liveserve_kv_blocks_used gauge
liveserve_kv_blocks_used{stage="thinker"} 12.0
liveserve_kv_blocks_used{stage="talker"} 3.0
# TYPE liveserve_live_sessions gauge
liveserve_live_sessions 2.0
# TYPE liveserve_session_resident_tokens gauge
liveserve_session_resident_tokens{session="a \\"quoted\\", id"} 7.0
"""


def test_one_parser_keys_samples_by_name_and_labels_and_reads_them_back():
    samples = parse_metrics(TEXT)
    assert samples['liveserve_kv_blocks_used{stage="thinker"}'] == 12.0 and samples["liveserve_live_sessions"] == 2.0
    assert total(samples, "liveserve_kv_blocks_used", {}) == 15.0
    assert total(samples, "liveserve_kv_blocks_used", {"stage": "talker"}) == 3.0
    assert total(samples, "liveserve_kv_blocks_free", {}) is None
    assert {"thinker", "talker"} <= set(label_values(samples, "liveserve_kv_blocks_used", "stage"))
    key = sample_key("liveserve_session_resident_tokens", {"session": 'a "quoted", id'})
    assert samples[key] == 7.0  # a label value with quotes and a comma keeps its own key
    assert split_key(key) == ("liveserve_session_resident_tokens", {"session": 'a "quoted", id'})


def test_the_metrics_url_of_a_realtime_url():
    assert metrics_url("ws://127.0.0.1:8011/v1/realtime?model=x") == "http://127.0.0.1:8011/metrics"
    assert metrics_url("wss://[::1]:9/v1/realtime") == "https://[::1]:9/metrics"


def test_a_running_server_is_known_by_its_url_and_scraped(server):
    with open_target(server.url) as target:
        assert not target.is_fresh and target.description == {"server": server.url}
        samples = target.metrics()
    assert samples["liveserve_live_sessions"] >= 0
    assert {"thinker", "talker"} <= set(label_values(samples, "liveserve_kv_blocks_used", "stage"))


def test_a_fresh_server_serves_the_config_with_its_overrides_in_order(tmp_path):
    overrides = [Override.parse("stages.thinker.kv.num_blocks=100"), Override.parse("stages.thinker.kv.num_blocks=96")]
    with open_target(None, small_config(tmp_path), overrides) as target:
        assert target.is_fresh and target.url.startswith("ws://127.0.0.1:")
        assert target.description == {"server_config": str(small_config(tmp_path)),
                                       "server_overrides": ["stages.thinker.kv.num_blocks=100",
                                                            "stages.thinker.kv.num_blocks=96"]}
        samples = target.metrics()
    used, free = (total(samples, f"liveserve_kv_blocks_{state}", {"stage": "thinker"}) for state in ("used", "free"))
    assert used + free == 96  # the last override wins


def test_a_bad_override_is_named_before_a_server_starts(tmp_path):
    with pytest.raises(ConfigError, match="stages.thinker.kv: num_blocks must be a positive integer, got 0"):
        with open_target(None, small_config(tmp_path), [Override.parse("stages.thinker.kv.num_blocks=0")]):
            pytest.fail("no server should start")
    served = ServedConfig.load(None, [Override.parse("server.max_sessions=3")])
    assert served.config.server.max_sessions == 3 and served.describe()["server_overrides"] == ["server.max_sessions=3"]
