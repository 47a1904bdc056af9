"""KV saturation forecasts on a fake clock: fill rate, time to saturation, warnings, per-session tokens."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from liveserve.admission import KVWatch, SaturationForecast
from orchestrator.datapath.request_id import RequestId


def feed(forecast: SaturationForecast, start: float, seconds: float, occupancy, sessions) -> None:
    """Samples every 0.5 s over [start, start + seconds]; `occupancy` and `sessions` are functions of time."""
    for i in range(int(seconds / 0.5) + 1):
        now = start + 0.5 * i
        forecast.add(now, occupancy(now), sessions(now))


def test_linear_fill_gives_the_rate_and_time_to_saturation_exactly():
    # 4 sessions each adding 0.5 % of the pool per second, from 10 %.
    forecast = SaturationForecast("thinker", window_s=10.0, expected_session_s=600.0)
    feed(forecast, 0.0, 20.0, lambda t: 0.1 + 4 * 0.005 * t, lambda t: 4)
    assert forecast.fill_rate == pytest.approx(0.005)
    assert forecast.occupancy == pytest.approx(0.5)
    assert forecast.time_to_saturation_s == pytest.approx(0.5 / (4 * 0.005))  # 25 s
    assert len(forecast.samples) == 21  # the window: 10 s of samples every 0.5 s


def test_the_rate_is_per_session_while_sessions_come_and_go():
    # One session for 5 s, then three: each still adds 1 % per second.
    forecast = SaturationForecast("thinker", window_s=10.0, expected_session_s=600.0)
    sessions = lambda t: 1 if t < 5 else 3  # noqa: E731
    occupancy = lambda t: 0.01 * t if t < 5 else 0.05 + 0.03 * (t - 5)  # noqa: E731
    feed(forecast, 0.0, 9.5, occupancy, sessions)
    assert forecast.fill_rate == pytest.approx(0.01)
    assert forecast.time_to_saturation_s == pytest.approx((1 - occupancy(9.5)) / (3 * 0.01))


def test_flat_or_shrinking_occupancy_or_no_sessions_has_no_time_to_saturation():
    flat = SaturationForecast("thinker", 10.0, 600.0)
    assert flat.fill_rate is None and flat.occupancy == 0.0  # no samples yet
    flat.add(0.0, 0.3, 2)
    assert flat.fill_rate is None  # one sample: nothing to fit
    feed(flat, 0.5, 5.0, lambda t: 0.3, lambda t: 2)
    assert flat.fill_rate == 0.0 and flat.time_to_saturation_s is None
    shrinking = SaturationForecast("thinker", 10.0, 600.0)
    feed(shrinking, 0.0, 5.0, lambda t: 0.5 - 0.01 * t, lambda t: 2)
    assert shrinking.fill_rate < 0 and shrinking.time_to_saturation_s is None
    idle = SaturationForecast("thinker", 10.0, 600.0)
    feed(idle, 0.0, 5.0, lambda t: 0.2, lambda t: 0)
    assert idle.fill_rate is None and idle.time_to_saturation_s is None  # no session-seconds to fit against


def test_warning_is_logged_once_per_crossing(caplog):
    # 2 sessions at 0.1 %/s each: t_sat = (1 - occupancy) / 0.002 s, under 300 s once occupancy passes 40 %.
    forecast = SaturationForecast("thinker", window_s=5.0, expected_session_s=300.0)
    with caplog.at_level(logging.WARNING, logger="liveserve.admission.forecast"):
        feed(forecast, 0.0, 90.0, lambda t: 0.2 + 0.002 * t, lambda t: 2)  # 20 % -> 38 %: t_sat 400 s -> 310 s
        assert not forecast.is_warning and not caplog.records
        feed(forecast, 90.5, 59.5, lambda t: 0.2 + 0.002 * t, lambda t: 2)  # -> 50 %: t_sat 250 s
        assert forecast.is_warning and len(caplog.records) == 1
        assert "thinker" in caplog.messages[0] and "300 s" in caplog.messages[0]
        feed(forecast, 151.0, 10.0, lambda t: 0.5, lambda t: 2)  # flat: the warning clears
        assert not forecast.is_warning
        feed(forecast, 161.5, 10.0, lambda t: 0.5 + 0.002 * (t - 161.0), lambda t: 2)  # filling again
        assert forecast.is_warning and len(caplog.records) == 2


def test_kv_watch_forecasts_each_pool_and_sums_resident_tokens_per_session():
    watch = KVWatch(window_s=10.0, expected_session_s=600.0)
    thinker = SimpleNamespace(name="thinker", kv_blocks_used=25, kv_blocks_free=75,
                              resident_tokens={RequestId("sess_1", "thinker", 0): 300,
                                               RequestId("sess_1", "thinker", 1): 20,
                                               RequestId("sess_2", "duplex-thinker"): 7})
    encoder = SimpleNamespace(name="encoder", kv_blocks_used=0, kv_blocks_free=0, resident_tokens={})
    watch.sample([thinker, encoder], num_sessions=2, now=0.0)
    assert set(watch.forecasts) == {"thinker"}  # no KV pool, no forecast
    assert watch.forecasts["thinker"].occupancy == 0.25
    assert watch.resident_tokens == {"sess_1": 320, "sess_2": 7}
    thinker.resident_tokens = {RequestId("sess_2", "duplex-thinker"): 9}
    watch.sample([thinker, encoder], num_sessions=1, now=0.5)
    assert watch.resident_tokens == {"sess_2": 9}  # sess_1 ended: no longer reported
