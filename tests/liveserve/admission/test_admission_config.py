"""The `admission:` section: defaults load, every mistake names its field."""

from __future__ import annotations

import pytest

from liveserve.admission import AdmissionConfig
from liveserve.config.loader import LAB_CONFIG, load_config
from liveserve.config.reader import ConfigError
from tests.liveserve.config.config_variant import write_variant


def load_variant(tmp_path, admission: dict, **server):
    def edit(data):
        data["admission"] = admission
        data["server"].update(server)
    return load_config(write_variant(tmp_path, edit))


def test_default_and_given_admission_settings_load(tmp_path):
    assert load_config().admission == load_config(LAB_CONFIG).admission == AdmissionConfig()
    config = load_variant(tmp_path, {"policy": "aimd", "initial_cap": 2, "decrease_factor": 0.5, "interval_s": 2})
    assert config.admission == AdmissionConfig(policy="aimd", initial_cap=2, decrease_factor=0.5, interval_s=2.0)
    assert load_variant(tmp_path, None).admission == AdmissionConfig()  # an empty section: the defaults


@pytest.mark.parametrize(
    ("admission", "message"),
    [
        ({"policy": "pid"}, r"admission: unknown admission policy 'pid'; choose from \['fixed', 'aimd'\]"),
        ({"initial_cap": 0}, r"admission: initial_cap must be a positive integer, got 0"),
        ({"min_cap": 3, "initial_cap": 2}, r"admission: initial_cap \(2\) must be at least min_cap \(3\)"),
        ({"target": 1.5}, r"admission: target must be a number in \(0, 1\]"),
        ({"decrease_factor": 1.0}, r"admission: decrease_factor must be a number in \(0, 1\), got 1.0"),
        ({"decrease_after": 0}, r"admission: decrease_after must be a positive integer, got 0"),
        ({"interval_s": 0}, r"admission: interval_s must be a finite number of seconds > 0"),
        ({"forecast_window_s": -1}, r"admission: forecast_window_s must be a finite number of seconds > 0"),
        ({"probe_wait_s": 1.0}, r"admission: probe_wait_s must be null or a finite number of seconds >= the latency "
                                r"window \(2.0\), got 1.0"),
        ({"interval_s": "soon"}, r"admission\.interval_s: expected float, got 'soon'"),
        ({"intervals": 1}, r"admission\.intervals: unknown field \(did you mean 'interval_s'\?\)"),
        ({"min_cap": 5, "initial_cap": 5}, r"admission\.min_cap: 5 exceeds server\.max_sessions \(4\)"),
    ],
)
def test_admission_mistakes_name_the_field(tmp_path, admission, message):
    with pytest.raises(ConfigError, match=message):
        load_variant(tmp_path, admission, max_sessions=4)
