"""`liveserve bench duplex`: its figures on synthetic logs, its options, its server config (over 300
lines: each figure of the result is checked on a log made for it)."""

from __future__ import annotations

import asyncio
import json
import math
import time

import numpy as np
import pytest
import websockets

from lab.duplex.analysis import find_stalls, latency_buckets, session_stalls, stall_threshold_s
from lab.duplex.options import DuplexOptions, parse_settings
from lab.duplex.plots import draw_plots
from lab.duplex.poller import read_poll
from lab.duplex.ramp import ramp_summary, ramp_timeline
from lab.duplex.records import FrameEvent, MetricsPoll, SessionLog
from lab.duplex.result import RunLog, build_result, format_summary
from lab.duplex.run import check_duplex, fresh_server_overrides
from lab.duplex.saturation import measured_t_sat, peak_occupancy, predicted_t_sat
from lab.duplex.speech_loop import LoopedSpeech
from lab.duplex.stream import StreamSetup, run_stream
from lab.prometheus import parse_metrics
from lab.server_target import ServedConfig
from liveserve.cli import main
from liveserve.config.document import Override
from liveserve.config.reader import ConfigError
from stages.config import WindowSpec
from tests.liveserve.realtime.realtime_harness import small_config

FRAME_S = 0.08


def streamed(index: int, *, start: float = 0.0, until: float = 10.0, delay: float = 0.05,
             missing: tuple[float, float] | None = None) -> SessionLog:
    """A session streaming 80 ms frames from `start` to `until`; each frame event comes `delay`
    after its audio, except those due inside `missing` (start, end), which come at its end."""
    log = SessionLog(index, start, session_id=f"sess_{index}", admitted_t=start, stream_start_t=start, end_t=until + 1)
    due = start + FRAME_S
    while due <= until:
        log.frame_due_t.append(due)
        t = due + delay
        if missing is not None and missing[0] <= due < missing[1]:
            t = missing[1] + delay
        log.frames.append(FrameEvent(t, len(log.frames), delay * 1000, len(log.frames) * 2))
        due += FRAME_S
    return log


# -- latency buckets ----------------------------------------------------------------------

def test_latency_percentiles_per_ten_second_bucket_by_arrival_time():
    frames = [FrameEvent(t, i, float(i % 100), None) for i, t in enumerate(np.arange(0.0, 25.0, 0.05))]
    buckets = latency_buckets(frames, duration_s=25.0)
    assert [(b["start_s"], b["end_s"], b["frames"]) for b in buckets] == [(0, 10, 200), (10, 20, 200), (20, 25, 100)]
    first = [float(i % 100) for i in range(200)]
    assert buckets[0]["p50"] == pytest.approx(np.percentile(first, 50))
    assert buckets[0]["p99"] == pytest.approx(np.percentile(first, 99)) and buckets[0]["max"] == 99.0
    assert buckets[2]["frames_per_s"] == pytest.approx(20.0)  # the last bucket is 5 s long


def test_frames_drained_after_the_run_count_in_the_last_bucket_and_empty_buckets_have_no_figures():
    frames = [FrameEvent(3.0, 0, 10.0, None), FrameEvent(20.4, 1, 30.0, None), FrameEvent(20.5, 2, None, None)]
    buckets = latency_buckets(frames, duration_s=20.0)
    assert [b["frames"] for b in buckets] == [1, 2]
    assert buckets[1]["count"] == 1 and buckets[1]["p50"] == 30.0  # a frame without a latency is only counted
    empty, = latency_buckets([], duration_s=5.0)
    assert empty["frames"] == 0 and empty["p99"] is None and empty["max"] is None


# -- stalls -------------------------------------------------------------------------------

def test_stall_threshold_is_one_second_or_three_frame_periods():
    assert stall_threshold_s(80) == 1.0 and stall_threshold_s(320) == 1.0
    assert stall_threshold_s(400) == pytest.approx(1.2) and stall_threshold_s(2000) == 6.0


def test_a_session_answered_every_frame_never_stalls():
    assert session_stalls(streamed(0), stall_threshold_s(80)) == []


def test_a_gap_longer_than_the_threshold_while_frames_are_due_is_a_stall():
    # frames due from 4.0 s to 6.0 s all arrive at 6.05 s: owed since the event before (about 4 s)
    log = streamed(3, missing=(4.0, 6.0))
    stall, = session_stalls(log, 1.0)
    assert stall.session == 3
    assert stall.start_s == pytest.approx(3.97, abs=0.05) and stall.end_s == pytest.approx(6.05)


def test_a_gap_shorter_than_the_threshold_is_no_stall():
    assert session_stalls(streamed(0, missing=(4.0, 4.8)), 1.0) == []


def test_silence_while_nothing_is_due_is_no_stall():
    # the last frame was due at 1.0 and answered; nothing more was sent (the stream paused)
    assert find_stalls([0.5, 1.0], [0.6, 1.1], end_t=9.0, threshold_s=1.0) == []


def test_frames_never_answered_stall_until_the_end_of_observation():
    assert find_stalls([0.5, 1.0, 1.5], [0.6], end_t=5.0, threshold_s=1.0) == [(1.0, 5.0)]
    # no frame at all: owed since the first frame was due
    assert find_stalls([0.5, 1.0], [], end_t=5.0, threshold_s=1.0) == [(0.5, 5.0)]


def test_a_session_closed_by_the_server_is_observed_only_until_then():
    log = streamed(0, until=3.0)
    log.frame_due_t.extend([3.1, 3.2])  # sent, never answered: the server closed the session at 3.15
    log.server_closed_t, log.end_t = 3.15, 20.0
    assert session_stalls(log, 1.0) == []


# -- saturation ---------------------------------------------------------------------------

def polls_filling(rate_per_s: float, until: float, t_sat: float | None = None) -> list[MetricsPoll]:
    return [MetricsPoll(t, occupancy=min(1.0, rate_per_s * t), t_sat_s=t_sat)
            for t in np.arange(0.0, until, 0.5).tolist()]


def test_measured_saturation_is_when_occupancy_first_reaches_099():
    polls = polls_filling(0.02, until=60.0)  # full at 50 s; 0.99 at 49.5 s
    assert measured_t_sat(polls) == 49.5 and peak_occupancy(polls) == 1.0
    assert measured_t_sat(polls_filling(0.01, until=60.0)) is None  # never full: null
    assert peak_occupancy([MetricsPoll(0.0)]) is None


def test_predicted_saturation_from_the_first_poll_ten_seconds_after_all_sessions_stream():
    polls = [MetricsPoll(t, occupancy=0.1, t_sat_s=100.0 - t) for t in np.arange(0.0, 30.0, 0.5).tolist()]
    polls[26] = MetricsPoll(13.0, occupancy=0.1, t_sat_s=math.nan)  # not filling at 13 s: skipped
    # the last session started streaming at 2.8 s: the first poll at >= 12.8 s with a forecast is 13.5 s
    assert predicted_t_sat(polls, since_t=2.8) == (pytest.approx(100.0), 13.5)
    assert predicted_t_sat([MetricsPoll(t, 0.1, math.nan) for t in range(30)], since_t=0.0) == (None, None)
    assert predicted_t_sat(polls, since_t=None) == (None, None)  # no session streamed


# -- ramp ---------------------------------------------------------------------------------

def test_ramp_counts_offered_admitted_and_rejected_over_time():
    admitted = [SessionLog(i, float(i), admitted_t=i + 0.1, end_t=12.0) for i in range(3)]
    admitted[0].frames.extend(FrameEvent(t, k, latency_ms=float(k)) for k, t in enumerate((7.0, 8.0, 9.0, 12.0, 13.0)))
    rejected = [SessionLog(i, float(i), rejected_t=i + 0.05, end_t=i + 0.05) for i in range(3, 5)]
    polls = [MetricsPoll(t, admission_cap=c, live_sessions=float(min(3, int(t) + 1))) for t, c in
             [(0.5, 1.0), (2.5, 3.0), (4.5, 3.0), (9.0, 3.0), (11.0, 3.0)]]
    timeline = ramp_timeline(admitted + rejected, polls)
    assert [(r["offered"], r["admitted"], r["rejected"], r["live"]) for r in timeline] == [
        (1, 1, 0, 1), (3, 3, 0, 3), (5, 3, 2, 3), (5, 3, 2, 3), (5, 3, 2, 3)]
    summary = ramp_summary(admitted + rejected, polls, duration_s=12.0, rate=1.0)
    assert (summary["offered"], summary["admitted"], summary["rejected"]) == (5, 3, 2)
    assert summary["settled_cap"] == 3.0 and summary["settled_live"] == 3.0  # polls in the last 4 s
    settled_frames = summary["settled_latency_ms"]  # received in [8, 12] s: frames 1, 2, 3
    assert settled_frames["count"] == 3 and settled_frames["max"] == 3.0 and settled_frames["p50"] == 2.0


def test_ramp_offers_open_loop_at_the_rate_for_the_whole_run():
    assert DuplexOptions(ramp=2.0, duration_s=3.0).offer_times() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert DuplexOptions(sessions=4, frame_ms=160).offer_times() == pytest.approx([0.0, 0.04, 0.08, 0.12])
    assert DuplexOptions(sessions=2, stagger_ms=1000).offer_times() == [0.0, 0.5]


# -- /metrics -----------------------------------------------------------------------------

METRICS = """\
# TYPE liveserve_kv_occupancy gauge
liveserve_kv_occupancy{stage="thinker"} 0.25
liveserve_kv_occupancy{stage="talker"} 0.5
# TYPE liveserve_kv_time_to_saturation_seconds gauge
liveserve_kv_time_to_saturation_seconds{stage="thinker"} NaN
# TYPE liveserve_live_sessions gauge
liveserve_live_sessions 3.0
# TYPE liveserve_session_resident_tokens gauge
liveserve_session_resident_tokens{stat="max"} 120.0
liveserve_session_resident_tokens{stat="mean"} 80.0
"""


def test_a_poll_reads_the_thinker_pool_the_live_count_and_resident_tokens():
    poll = read_poll(1.5, parse_metrics(METRICS))
    assert (poll.t, poll.occupancy, poll.live_sessions, poll.admission_cap) == (1.5, 0.25, 3.0, None)
    assert math.isnan(poll.t_sat_s)
    assert poll.resident_tokens == {"max": 120.0, "mean": 80.0}


# -- the result ---------------------------------------------------------------------------

def test_the_result_has_the_figures_and_is_strict_json(tmp_path):
    sessions = [streamed(0, until=20.0), streamed(1, start=0.04, until=20.0, missing=(8.0, 10.0))]
    polls = [MetricsPoll(t, occupancy=0.01 * t, t_sat_s=math.nan if t < 12 else 100.0 - t, live_sessions=2.0,
                         resident_tokens={"max": 10.0 * t, "mean": 10.0 * t})
             for t in np.arange(0.0, 20.5, 0.5).tolist()]
    config = {"frame_ms": 80, "duration_s": 20.0, "thinker_window": None, "window": None}
    result = build_result(RunLog(sessions, polls, 20.0, 80), config)
    json.dumps(result, allow_nan=False)
    assert result["stalled_sessions"] == 1 and result["stalls"][0]["session"] == 1
    assert result["peak_occupancy"] == pytest.approx(0.2) and result["t_sat_measured_s"] is None
    assert result["t_sat_predicted_s"] == pytest.approx(100.0) and result["t_sat_predicted_at_s"] == 12.0
    assert result["occupancy"][:2] == [[0.0, 0.0], [0.5, 0.005]]
    assert [b["start_s"] for b in result["frame_latency_ms"]] == [0, 10]
    assert result["frame_latency_ms"][0]["p99"] == pytest.approx(50.0)
    assert result["frames_total"] == sum(len(s.frames) for s in sessions) > 400 and result["sessions"]["admitted"] == 2
    assert result["server"][0]["t_sat_s"] is None  # NaN is written as null
    assert result["per_session"][0]["context_tokens"] == 2 * (len(sessions[0].frames) - 1)
    assert result["ramp"] is None and result["warnings"] == []
    summary = format_summary(result)
    assert "Stalled sessions" in summary and "0-10" in summary
    assert sorted(p.name for p in draw_plots(result, tmp_path)) == ["latency.png", "occupancy.png"]


def test_a_server_answering_more_frames_than_were_sent_is_warned_of():
    # a running server with 80 ms frames, measured as if it had 160 ms ones
    log = streamed(0, until=4.0)
    del log.frame_due_t[len(log.frame_due_t) // 2:]
    warning, = build_result(RunLog([log], [], 4.0, 160, num_failed_polls=0), {})["warnings"]
    assert "the server's frame period is shorter than 160 ms" in warning


# -- options and server config ------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    ({"sessions": 2, "frame_ms": 100}, "--frame-ms must be a multiple of 80 in [80, 2000], got 100"),
    ({"sessions": 2, "frame_ms": 2080}, "--frame-ms must be a multiple of 80"),
    ({"sessions": 2, "frame_ms": 0}, "--frame-ms must be a multiple of 80"),
    ({"sessions": 0}, "--sessions must be an integer >= 1, got 0"),
    ({}, "--sessions is required (or --ramp RATE"),
    ({"sessions": 1, "duration_s": 0.0}, "--duration-s must be a finite number > 0"),
    ({"ramp": -1.0}, "--ramp must be a finite number > 0"),
    ({"sessions": 1, "sinks": 4}, "--sinks needs --window"),
    ({"sessions": 1, "history": "ssm"}, "--history needs --window"),
    ({"sessions": 1, "session_s": 10.0}, "--session-s needs --ramp"),
    ({"ramp": 1.0, "session_s": 0.0}, "--session-s must be a finite number > 0"),
    ({"sessions": 1, "window": 0}, "--window must be an integer >= 1"),
    ({"sessions": 1, "window": 64, "sinks": -1}, "--sinks must be an integer >= 0"),
    ({"sessions": 1, "chunk_ms": 60}, "--chunk-ms must be at least 10 and divide --frame-ms 80"),
    ({"sessions": 1, "admission": "lifo"}, "--admission must be one of fixed, aimd"),
    ({"sessions": 1, "url": "ws://example.com/v1/realtime"}, "--url must be a loopback ws:// address"),
    ({"sessions": 1, "url": "ws://127.0.0.1:8000/v1/realtime", "window": 64}, "--window configure a fresh server"),
    ({"sessions": 1, "url": "ws://127.0.0.1:8000/v1/realtime", "admission_set": (("target", 0.4),)},
     "--admission-set configure a fresh server"),
    ({"sessions": 1, "url": "ws://127.0.0.1:8000/v1/realtime", "overrides": (Override.parse("server.port=1"),)},
     "--set configure a fresh server"),
])
def test_bad_options_are_refused_naming_the_flag(fields, message):
    with pytest.raises(ValueError) as error:
        DuplexOptions(**fields)
    assert message in str(error.value)


def test_admission_settings_are_name_value_pairs_checked_with_the_config():
    pairs = parse_settings("--admission-set", ["target=0.45", " decrease_factor = 0.9", "latency_window_s="])
    assert pairs == (("target", 0.45), ("decrease_factor", 0.9), ("latency_window_s", None))
    with pytest.raises(ValueError, match="--admission-set takes NAME=VALUE, got 'target'"):
        parse_settings("--admission-set", ["target"])
    config = served(DuplexOptions(ramp=0.5, duration_s=60.0, admission_set=pairs))
    assert (config.admission.target, config.admission.decrease_factor) == (0.45, 0.9)
    assert config.admission.latency_window_s is None and config.admission.policy == "aimd"
    with pytest.raises(ValueError, match="target"):
        served(DuplexOptions(ramp=0.5, admission_set=(("target", 2.0),)))


def test_the_command_line_reports_a_bad_admission_setting_in_one_line(capsys):
    assert main(["bench", "duplex", "--ramp", "1", "--duration-s", "5", "--admission-set", "warp=9"]) == 2
    assert "warp" in capsys.readouterr().err


def test_ramp_sessions_hang_up_after_their_lifetime_or_at_the_end():
    assert DuplexOptions(ramp=1.0, duration_s=30.0, session_s=10.0).stop_time(25.0) == 30.0
    assert DuplexOptions(ramp=1.0, duration_s=30.0, session_s=10.0).stop_time(5.0) == 15.0
    assert DuplexOptions(ramp=1.0, duration_s=30.0).stop_time(5.0) == 30.0


def test_the_command_line_reports_a_bad_option_in_one_line(capsys):
    assert main(["bench", "duplex", "--sessions", "2", "--duration-s", "5", "--frame-ms", "120"]) == 2
    assert capsys.readouterr().err == "error: --frame-ms must be a multiple of 80 in [80, 2000], got 120\n"


def served(options: DuplexOptions):
    """The validated config a fresh server for `options` would serve."""
    return ServedConfig.load(options.config, fresh_server_overrides(options)).config


def test_the_server_config_carries_the_runs_overrides():
    options = DuplexOptions(sessions=40, frame_ms=160, window=128, sinks=8, kv_blocks=256)
    assert [str(o) for o in fresh_server_overrides(options)] == [
        "duplex.frame_ms=160", "stages.thinker.window={sinks: 8, tokens: 128}",
        "stages.thinker.kv.eviction=none", "stages.thinker.kv.preload=false", "stages.thinker.kv.idle_offload_s=null",
        "stages.thinker.kv.num_blocks=256", "admission.policy=fixed",
        "server.max_sessions=41"]  # as the result records them (a window: no host tier)
    config = served(options)
    assert config.duplex.frame_ms == 160
    assert config.pipeline.thinker.window == WindowSpec(tokens=128, sinks=8)
    assert config.pipeline.thinker.kv.num_blocks == 256
    assert config.server.max_sessions == 41  # every stream, and the warm-up session still closing
    assert config.admission.policy == "fixed"  # a fixed run measures every stream it offers
    ramp = served(DuplexOptions(ramp=0.5, duration_s=60.0))
    assert ramp.admission.policy == "aimd" and ramp.server.max_sessions == 31
    assert ramp.pipeline.thinker.window is None  # unbounded
    history = DuplexOptions(sessions=4, window=128, history="ssm")
    assert "stages.thinker.window={history: ssm, sinks: 0, tokens: 128}" in map(str, fresh_server_overrides(history))
    assert served(history).pipeline.thinker.window == WindowSpec(tokens=128, history="ssm")


def test_set_overrides_apply_last_and_a_bad_key_is_named_before_anything_runs():
    block_size = Override.parse("stages.thinker.kv.block_size=32")
    config = served(DuplexOptions(sessions=2, kv_blocks=256, overrides=(Override.parse("server.max_sessions=5"),
                                                                         block_size)))
    assert config.server.max_sessions == 5 and config.pipeline.thinker.kv.block_size == 32  # --set wins
    assert config.pipeline.thinker.kv.num_blocks == 256
    with pytest.raises(ConfigError, match=r"stages.thinker.kv.block_sise: unknown field \(did you mean 'block_size'"):
        check_duplex(DuplexOptions(sessions=2, overrides=(Override.parse("stages.thinker.kv.block_sise=32"),)))


def test_the_command_line_reports_a_bad_set_key_in_one_line(capsys):
    argv = ["bench", "duplex", "--sessions", "1", "--duration-s", "5", "--set", "stages.thinker.kv.num_blockz=64"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: stages.thinker.kv.num_blockz: unknown field") and err.count("\n") == 1


def test_looped_speech_wraps_around():
    speech = LoopedSpeech(np.arange(5, dtype=np.int16))
    assert speech.chunk(3, 4).tolist() == [3, 4, 0, 1]
    assert LoopedSpeech.from_dir().num_samples > 24_000 * 10  # the fixture clips, more than 10 s


# -- end to end ---------------------------------------------------------------------------

def test_two_streams_against_a_fresh_server_get_every_frame_without_a_stall(tmp_path, capsys):
    out, plots = tmp_path / "result.json", tmp_path / "plots"
    status = main(["bench", "duplex", "--config", str(small_config(tmp_path)), "--sessions", "2", "--duration-s", "6",
                   "--frame-ms", "160", "--set", "stages.thinker.kv.num_blocks=1536", "--result-json", str(out),
                   "--plot-dir", str(plots)])
    assert status == 0
    assert "Stalled sessions" in capsys.readouterr().out
    result = json.loads(out.read_text())
    for field in ("stalled_sessions", "peak_occupancy", "occupancy", "frame_latency_ms", "t_sat_predicted_s",
                  "t_sat_measured_s", "config"):
        assert field in result
    assert result["stalled_sessions"] == 0 and result["stalls"] == []
    assert result["sessions"] == {"offered": 2, "admitted": 2, "rejected": 0, "failed": 0, "closed_by_server": 0}
    for session in result["per_session"]:  # about 6 s / 160 ms frames each, every one answered
        assert 30 <= session["frames"] == session["frames_due"] <= 38
    assert 0 < result["peak_occupancy"] < 0.99 and result["t_sat_measured_s"] is None
    assert len(result["occupancy"]) >= 10  # a poll every 0.5 s
    assert result["frame_latency_ms"][0]["p50"] > 0
    assert result["config"]["frame_ms"] == 160 and result["config"]["thinker_window"] is None
    assert result["config"]["kv_num_blocks"] == 1536
    assert result["config"]["overrides"] == ["stages.thinker.kv.num_blocks=1536"]
    assert result["config"]["server_overrides"][0] == "duplex.frame_ms=160"  # the sugar first, --set last
    assert result["config"]["server_overrides"][-1] == "stages.thinker.kv.num_blocks=1536"
    assert sorted(p.name for p in plots.iterdir()) == ["latency.png", "occupancy.png"]


# -- one stream against a scripted server ----------------------------------------------------

async def scripted_server(ws, reject: bool = False) -> None:
    """Rejects, or answers duplex on and one frame event per 80 ms of audio (two 40 ms appends)."""
    if reject:
        await ws.send(json.dumps({"type": "error", "error": {"code": "session_capacity_exceeded", "message": "full"}}))
        await ws.close(code=1013)
        return
    await ws.send(json.dumps({"type": "session.created", "session": {"id": "sess_x"}}))
    appends = 0
    async for message in ws:
        event = json.loads(message)
        if event["type"] == "session.update":
            assert event["session"] == {"liveserve": {"duplex": True}}
            await ws.send(json.dumps({"type": "session.updated", "session": {"id": "sess_x"}}))
        elif event["type"] == "input_audio_buffer.append":
            appends += 1
            if appends % 2 == 0:
                await ws.send(json.dumps({"type": "liveserve.duplex.frame", "frame_index": appends // 2 - 1,
                                          "latency_ms": 5.0, "context_tokens": appends}))


def run_against(handler, stop_at: float = 1.0) -> SessionLog:
    async def main_() -> SessionLog:
        async with websockets.serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            start = time.monotonic()
            setup = StreamSetup(f"ws://127.0.0.1:{port}", LoopedSpeech(np.ones(2400, np.int16)), 80, 40,
                                lambda: time.monotonic() - start)
            return await run_stream(SessionLog(0, 0.0), setup, speech_start=0, stop_at=stop_at,
                                    listen_until=stop_at + 0.3)

    return asyncio.run(main_())


def test_a_stream_sends_speech_in_real_time_and_logs_every_frame():
    log = run_against(scripted_server)
    assert log.is_admitted and not log.is_failed and log.session_id == "sess_x"
    assert len(log.frame_due_t) == len(log.frames) == 12  # 1 s of speech from about 0.01 s: 12 whole frames
    assert log.frame_due_t[0] == pytest.approx(log.stream_start_t + 0.08, abs=0.03)
    assert log.frame_due_t[-1] == pytest.approx(log.stream_start_t + 0.96, abs=0.03)  # paced, no drift
    assert [f.frame_index for f in log.frames] == list(range(12))
    assert log.frames[3].context_tokens == 8 and log.end_t >= 1.3
    assert session_stalls(log, 1.0) == []


def test_a_rejected_stream_is_counted_not_failed():
    log = run_against(lambda ws: scripted_server(ws, reject=True))
    assert log.is_rejected and not log.is_admitted and not log.is_failed
    assert log.errors[0].code == "session_capacity_exceeded" and not log.frame_due_t
