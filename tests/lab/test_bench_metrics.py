"""Benchmark metrics and the result object, against hand-computed numbers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.metrics import (
    RequestMetrics,
    aggregate,
    nonstalling_underrun_ms,
    playback_underruns_ms,
    summarize,
)
from lab.result_json import build_result, request_record


def test_underruns_of_a_known_arrival_pattern():
    # 200 ms chunks at 0, 0.3 and 0.45 s
    # 0.00: plays 0.00-0.20
    # 0.30: dry since 0.20 -> underrun 100 ms; plays 0.30-0.50
    # 0.45: 50 ms still buffered -> no underrun; plays on to 0.70
    chunks = [(0.0, 200), (0.3, 200), (0.45, 200)]
    gaps = playback_underruns_ms(chunks)
    assert gaps == pytest.approx([100])
    assert nonstalling_underrun_ms(chunks) == pytest.approx(100)  # due at 0, 0.2, 0.4
    request = RequestMetrics("r", "completed", underrun_ms=tuple(gaps))
    assert request.continuity_ok
    result = aggregate([request], duration_s=1.0)
    assert result["continuity"] == {"c50": 0.0, "c100": 1.0, "c200": 1.0}


def test_the_nonstalling_underrun_accumulates_over_dry_spells():
    # 200 ms chunks at 0, 0.3, 0.6: due at 0, 0.2, 0.4 -> 0, 100, 200 ms late;
    # a pausing player is dry 0.2-0.3 and 0.5-0.6
    chunks = [(0.0, 200), (0.3, 200), (0.6, 200)]
    assert nonstalling_underrun_ms(chunks) == pytest.approx(200)
    spells = playback_underruns_ms(chunks)
    assert spells == pytest.approx([100, 100])
    assert RequestMetrics("r", "completed", underrun_ms=tuple(spells)).max_underrun_ms == pytest.approx(200)


@given(st.lists(st.tuples(st.floats(0, 2), st.floats(0, 500)), max_size=20))
def test_the_nonstalling_underrun_is_the_pausing_players_total_stall(raw):
    arrivals = sorted(t for t, _ in raw)
    chunks = list(zip(arrivals, [ms for _, ms in raw]))
    assert nonstalling_underrun_ms(chunks) == pytest.approx(sum(playback_underruns_ms(chunks)), abs=1e-6)


def test_no_chunks_no_underruns_and_order_is_checked():
    assert playback_underruns_ms([]) == []
    with pytest.raises(ValueError, match="arrival order"):
        playback_underruns_ms([(1.0, 80), (0.5, 80)])


def test_continuity_threshold_is_inclusive():
    assert RequestMetrics("r", "completed", underrun_ms=(100.0,)).continuity_ok
    assert not RequestMetrics("r", "completed", underrun_ms=(100.5,)).continuity_ok


def test_latencies_from_known_timestamps():
    r = RequestMetrics(
        "r", "completed", turn_end_s=10.0, first_text_s=10.125, first_audio_s=10.25, last_audio_s=11.5,
        audio_ms=3000.0, e2e_s=3.5,
    )
    assert r.text_ttft_ms == pytest.approx(125)  # 10.125 - 10.0
    assert r.audio_ttfp_ms == pytest.approx(250)  # 10.25 - 10.0
    assert r.audio_rtf == pytest.approx(0.5)  # (11.5 - 10.0) s / 3.0 s
    assert r.e2e_ms == pytest.approx(3500)


def test_missing_times_give_none():
    r = RequestMetrics("r", "failed")
    assert (r.audio_ttfp_ms, r.text_ttft_ms, r.audio_rtf, r.e2e_ms) == (None, None, None, None)
    no_audio = RequestMetrics("r", "completed", turn_end_s=1.0, last_audio_s=2.0, audio_ms=0.0)
    assert no_audio.audio_rtf is None


def test_summarize_ten_values():
    # 1..10: mean 5.5; rank h = 9 * p / 100 between sorted values
    # p50: h = 4.5  -> 5 + 0.5 * (6 - 5)   = 5.5
    # p90: h = 8.1  -> 9 + 0.1 * (10 - 9)  = 9.1
    # p95: h = 8.55 -> 9 + 0.55            = 9.55
    # p99: h = 8.91 -> 9 + 0.91            = 9.91
    s = summarize([7, 2, None, 9, 1, 10, 4, 3, 8, 6, 5])
    assert s == pytest.approx({"mean": 5.5, "p50": 5.5, "p90": 9.1, "p95": 9.55, "p99": 9.91})


def test_summarize_three_values():
    # 10, 20, 40: mean 70/3; h = 2 * p / 100
    # p50: h = 1    -> 20
    # p90: h = 1.8  -> 20 + 0.8 * 20  = 36
    # p95: h = 1.9  -> 38
    # p99: h = 1.98 -> 39.6
    s = summarize([40.0, 10.0, 20.0])
    assert s == pytest.approx({"mean": 70 / 3, "p50": 20, "p90": 36, "p95": 38, "p99": 39.6})


def test_summarize_nothing_is_all_none():
    assert summarize([]) == {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None}
    assert summarize([None, None])["p99"] is None


def _run() -> list[RequestMetrics]:
    return [
        # finished: TTFP 200, RTF 1.0 / 2.0 = 0.5, e2e 1500, underruns 40
        RequestMetrics("a", "completed", turn_end_s=0.0, first_text_s=0.1, first_audio_s=0.2, last_audio_s=1.0,
                       audio_ms=2000.0, underrun_ms=(40.0,), e2e_s=1.5,
                       text_tokens=10, codec_frames=30),
        # finished at max_output_tokens: TTFP 400, RTF 2.0 / 1.0 = 2.0, e2e 2500, underrun 20 + 150
        RequestMetrics("b", "incomplete", turn_end_s=5.0, first_text_s=5.3, first_audio_s=5.4, last_audio_s=7.0,
                       audio_ms=1000.0, underrun_ms=(20.0, 130.0), e2e_s=2.5,
                       text_tokens=20, codec_frames=60),
        # barge-in: TTFP 300, RTF 0.5 / 0.5 = 1.0, e2e not counted; 5 + 15 unheard
        RequestMetrics("c", "cancelled", turn_end_s=9.0, first_text_s=9.2, first_audio_s=9.3, last_audio_s=9.5,
                       audio_ms=500.0, e2e_s=0.9, text_tokens=10, codec_frames=30,
                       unheard_text_tokens=5, unheard_codec_frames=15),
        # failed: counted nowhere but num_failed (and its generated tokens)
        RequestMetrics("d", "failed", text_tokens=0, codec_frames=0),
    ]


def test_aggregate_hand_computed():
    result = aggregate(_run(), duration_s=4.0)
    assert (result["num_requests"], result["num_completed"], result["num_failed"]) == (4, 2, 1)
    assert result["num_cancelled"] == 1  # the barge-in: neither finished nor failed
    assert result["completed_rps"] == pytest.approx(0.5)  # 2 finished / 4 s
    assert result["audio_ttfp_ms"]["mean"] == pytest.approx(300)  # (200 + 400 + 300) / 3
    assert result["audio_ttfp_ms"]["p50"] == pytest.approx(300)
    assert result["text_ttft_ms"]["mean"] == pytest.approx(200)  # (100 + 300 + 200) / 3
    assert result["audio_rtf"]["p50"] == pytest.approx(1.0)  # median of 0.5, 2.0, 1.0
    assert result["e2e_ms"]["mean"] == pytest.approx(2000)  # (1500 + 2500) / 2, cancelled excluded
    assert result["continuity_ok_rate"] == pytest.approx(2 / 3)  # max underruns 40, 150, 0
    assert result["continuity"] == pytest.approx({"c50": 2 / 3, "c100": 2 / 3, "c200": 1.0})
    assert result["wasted_token_ratio"] == pytest.approx(20 / 160)  # (5 + 15) / (40 + 80 + 40)


def test_aggregate_of_nothing():
    result = aggregate([], duration_s=1.0)
    assert result["audio_ttfp_ms"]["mean"] is None and result["continuity_ok_rate"] is None
    assert (result["completed_rps"], result["wasted_token_ratio"], result["num_requests"]) == (0.0, None, 0)


@pytest.mark.parametrize("duration_s", [0.0, -1.0, float("inf"), float("nan")])
def test_aggregate_rejects_a_bad_duration(duration_s):
    with pytest.raises(ValueError, match="duration_s"):
        aggregate([], duration_s)


def test_result_object_fields_and_records():
    requests = _run()
    result = build_result(requests, 4.0, kv={"blocks_used_peak": 12}, config={"request_rate": float("inf")})
    assert list(result) == [
        "audio_ttfp_ms", "text_ttft_ms", "audio_rtf", "e2e_ms", "continuity_ok_rate", "continuity",
        "completed_rps", "wasted_token_ratio", "num_requests", "num_completed", "num_cancelled",
        "num_failed", "kv", "config", "requests",
    ]
    assert result["kv"] == {"blocks_used_peak": 12}
    assert result["config"] == {"request_rate": "inf"}  # as vllm bench writes it
    record = result["requests"][1]
    assert record["request_id"] == "b" and record["underrun_ms"] == [20.0, 130.0]
    assert record["max_underrun_ms"] == pytest.approx(150.0)
    assert record["audio_ttfp_ms"] == pytest.approx(400) and record["continuity_ok"] is False
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_request_record_keeps_every_field():
    record = request_record(RequestMetrics("x", "completed", prompt_tokens=7))
    assert record["prompt_tokens"] == 7 and record["unheard_codec_frames"] == 0
    assert {"audio_ttfp_ms", "text_ttft_ms", "audio_rtf", "e2e_ms", "continuity_ok"} <= set(record)
