"""Replay planning, options, presets and server figures: pure logic, no server."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from lab.replay.options import ReplayOptions
from lab.replay.plan import load_requests, plan_sessions
from lab.replay.presets import PRESETS, PresetUnavailable, derive_config
from lab.replay.run import server_overrides
from lab.replay.server_figures import kv_figures
from lab.workloads import WorkloadRequest
from liveserve.config.document import Override
from liveserve.config.loader import lab_config_path, load_config, read_config_data, shipped_configs
from stages.models.tokenizer import TextTokenizer

TOKENIZER = TextTokenizer.default()


def requests(n: int, session_of=lambda i: None, **fields) -> list[WorkloadRequest]:
    return [WorkloadRequest(f"r{i}", "hi", 1, 10 * (i + 1), session_id=session_of(i), turn=i, **fields)
            for i in range(n)]


def test_random_requests_have_exact_lengths_within_the_range():
    options = ReplayOptions(num_requests=50, random_input_len=20, random_output_len=40, random_range_ratio=0.5)
    loaded = load_requests(options, TOKENIZER)
    assert len(loaded) == 50
    assert all(10 <= r.prompt_tokens <= 30 and 20 <= r.response_tokens <= 60 for r in loaded)
    assert all(len(TOKENIZER.encode_literal(r.prompt)) == r.prompt_tokens for r in loaded)
    assert len({r.response_tokens for r in loaded}) > 5
    assert load_requests(options, TOKENIZER) == loaded  # same seed, same workload


def test_fixed_random_lengths_without_a_range():
    loaded = load_requests(ReplayOptions(num_requests=3, random_input_len=7, random_output_len=9), TOKENIZER)
    assert {(r.prompt_tokens, r.response_tokens) for r in loaded} == {(7, 9)}


def test_each_request_is_its_own_session_released_at_gamma_arrivals():
    sessions = plan_sessions(requests(4), ReplayOptions(request_rate=2.0, seed=1), audio_ms_per_token=240)
    assert [len(s.turns) for s in sessions] == [1, 1, 1, 1]
    starts = [s.start_s for s in sessions]
    assert starts == sorted(starts) and starts[-1] == pytest.approx(4 / 2.0)  # vLLM rescales to n / rate


def test_infinite_rate_releases_everything_at_once():
    sessions = plan_sessions(requests(3), ReplayOptions(), audio_ms_per_token=240)
    assert [s.start_s for s in sessions] == [0.0, 0.0, 0.0]


def test_turns_of_a_session_share_one_connection_in_turn_order():
    reqs = requests(4, session_of=lambda i: "ab"[i % 2])
    reqs.reverse()
    sessions = plan_sessions(reqs, ReplayOptions(), audio_ms_per_token=240)
    assert [[t.request.request_id for t in s.turns] for s in sessions] == [["r1", "r3"], ["r0", "r2"]]


def test_trace_arrivals_start_sessions_at_their_first_timestamp(tmp_path):
    reqs = [WorkloadRequest("a", "x", 1, 1, arrival_s=3.0), WorkloadRequest("b", "x", 1, 1, arrival_s=1.0)]
    options = ReplayOptions(dataset="burstgpt", dataset_path=tmp_path / "t.csv", trace_arrivals=True)
    sessions = plan_sessions(reqs, options, audio_ms_per_token=240)
    assert [(s.turns[0].request.request_id, s.start_s) for s in sessions] == [("b", 1.0), ("a", 3.0)]


def test_barge_ins_follow_the_probability_and_cut_from_reply_durations():
    reqs = requests(400)
    durations = {10 * (i + 1) * 100.0 for i in range(400)}  # response_tokens * 100 ms per token
    never = plan_sessions(reqs, ReplayOptions(barge_in_prob=0.0), audio_ms_per_token=100)
    always = plan_sessions(reqs, ReplayOptions(barge_in_prob=1.0), audio_ms_per_token=100)
    half = plan_sessions(reqs, ReplayOptions(barge_in_prob=0.5), audio_ms_per_token=100)
    assert all(s.turns[0].barge_in_after_ms is None for s in never)
    cuts = [s.turns[0].barge_in_after_ms for s in always]
    assert set(cuts) <= durations and len(set(cuts)) > 100
    interrupted = sum(s.turns[0].barge_in_after_ms is not None for s in half)
    assert 160 <= interrupted <= 240
    # the same draws: an interrupted request gets the cut it would get at probability 1
    assert all(h.turns[0].barge_in_after_ms in (None, a.turns[0].barge_in_after_ms) for h, a in zip(half, always))


@pytest.mark.parametrize(("fields", "message"), [
    ({"dataset": "sharegpt"}, "dataset_path is required"),
    ({"dataset": "nope"}, "dataset must be one of"),
    ({"trace_arrivals": True}, "trace_arrivals needs a dataset with timestamps"),
    ({"num_requests": 0}, "num_requests must be a positive integer"),
    ({"request_rate": -1.0}, "request_rate must be a positive number or inf"),
    ({"time_scale": math.inf}, "time_scale must be a positive number, got inf"),
    ({"barge_in_prob": 1.5}, "barge_in_prob must be in"),
    ({"hold_until_heard": "yes"}, "hold_until_heard must be true or false"),
    ({"random_range_ratio": 1.0}, "random_range_ratio must be in"),
    ({"url": "ws://example.com/v1/realtime"}, "loopback"),
    ({"url": "ws://127.0.0.1:1/v1/realtime", "config": Path("x.yaml")}, "not both"),
])
def test_bad_options_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        ReplayOptions(**fields)


def test_presets_override_every_stage_and_validate_through_the_server_config():
    source = lab_config_path()
    raw, config = derive_config("fcfs-nooffload", read_config_data(source), source)
    assert {raw["stages"][s]["scheduler"]["policy"] for s in ("encoder", "thinker", "talker", "vocoder")} == {"fcfs"}
    assert config.pipeline.thinker.scheduler.policy == "fcfs"
    offloading, _ = derive_config("fcfs-lru", raw, source)
    assert offloading["stages"]["thinker"]["kv"]["eviction"] == "lru"
    assert raw["stages"]["thinker"]["kv"]["eviction"] == "none"  # the input is not modified


def test_a_fresh_server_admits_the_sessions_the_run_keeps_in_flight():
    def max_sessions(**fields) -> list[str]:
        return [str(o) for o in server_overrides(ReplayOptions(**fields)) if o.path == ("server", "max_sessions")]

    assert load_config(lab_config_path()).server.max_sessions == 32
    assert max_sessions(max_concurrency=48) == ["server.max_sessions=49"]  # 48 users and the warm-up session
    assert max_sessions(max_concurrency=8) == []  # the config's 32 admit them
    assert max_sessions() == []  # no cap on sessions in flight: the server's limit is part of the run
    with_set = max_sessions(max_concurrency=48, overrides=(Override(("server", "max_sessions"), 16),))
    assert with_set == ["server.max_sessions=49", "server.max_sessions=16"]  # --set applies last


def test_a_preset_the_server_refuses_says_which_component():
    source = lab_config_path()
    data = read_config_data(source)
    data["stages"]["thinker"]["kv"]["host_blocks"] = -1  # a host tier the server refuses
    with pytest.raises(PresetUnavailable, match=r"'fcfs-lru' \(fcfs scheduling, lru KV eviction\) cannot run.*"
                                                 r"stages.thinker.kv: host_blocks must be an integer >= 0"):
        derive_config("fcfs-lru", data, source)
    with pytest.raises(PresetUnavailable, match="unknown policy preset 'lifo'"):
        derive_config("lifo", read_config_data(source), source)
    for name in PRESETS:  # this build has every component
        derive_config(name, read_config_data(source), source)


def test_kv_figures_are_differences_of_what_the_server_exports():
    before = {'liveserve_stage_preemptions{stage="thinker"}': 2.0, 'liveserve_stage_preemptions{stage="talker"}': 1.0,
              'liveserve_unheard_units_total{stage="talker"}': 10.0,
              'liveserve_kv_block_seconds_total{stage="thinker"}': 100.0}
    after = {'liveserve_stage_preemptions{stage="thinker"}': 5.0, 'liveserve_stage_preemptions{stage="talker"}': 1.0,
             'liveserve_unheard_units_total{stage="talker"}': 40.0,
             'liveserve_kv_reload_seconds_total{path="critical"}': 0.25,
             'liveserve_kv_reload_seconds_total{path="background"}': 1.5,
             'liveserve_kv_blocks_peak{stage="thinker"}': 30.0, 'liveserve_kv_blocks_peak{stage="talker"}': 12.0,
             'liveserve_kv_block_seconds_total{stage="thinker"}': 300.0,
             'liveserve_kv_block_seconds_total{stage="talker"}': 40.0,
             'liveserve_kv_preloads_total{outcome="hit",stage="thinker"}': 4.0,
             'liveserve_kv_preloads_total{outcome="too_late",stage="thinker"}': 1.0,
             'liveserve_kv_fallbacks_total{kind="store",stage="thinker"}': 6.0,
             'liveserve_kv_fallbacks_total{kind="store",stage="talker"}': 1.0,
             'liveserve_kv_host_blocks{stage="thinker",when="peak"}': 80.0,
             'liveserve_kv_host_blocks{stage="thinker",when="now"}': 50.0}
    figures = kv_figures(before, after, duration_s=20.0)
    assert figures["preemptions"] == 3.0 and figures["preemptions_by_stage"] == {"talker": 0.0, "thinker": 3.0}
    assert figures["reload_ms_on_path"] == pytest.approx(250.0) and figures["reload_ms_off_path"] == pytest.approx(1500.0)
    assert figures["peak_device_blocks"] == 42.0
    assert figures["peak_device_blocks_by_stage"] == {"talker": 12.0, "thinker": 30.0}
    assert figures["mean_device_blocks_by_stage"] == {"talker": pytest.approx(2.0), "thinker": pytest.approx(10.0)}
    assert figures["mean_device_blocks"] == pytest.approx(12.0)
    assert figures["unheard_units"] == {"talker": 30.0}
    assert figures["preloads"] == {"hit": 4.0, "too_late": 1.0} and figures["preload_hits"] == 4.0
    assert figures["fallbacks"] == {"store": 7.0} and figures["peak_host_blocks_by_stage"] == {"thinker": 80.0}
    assert figures["preload_cancelled"] is None and figures["evictions"] is None  # not exported


@pytest.mark.parametrize("shipped, preset", [
    ("tiny-omni-cpu", "liveserve"),
    ("tiny-omni-cpu-fcfs-lru", "fcfs-lru"),
    ("tiny-omni-cpu-fcfs-nooffload", "fcfs-nooffload"),
])
def test_the_shipped_configs_are_the_lab_config_served_by_a_preset(shipped, preset):
    # tiny-omni-cpu is LiveServe's own policies; each baseline config is tiny-omni-cpu as its preset serves it
    source = lab_config_path()
    _, derived = derive_config(preset, read_config_data(source), source)
    assert dataclasses.replace(load_config(shipped), source=derived.source) == derived


def test_presets_set_the_stages_of_the_configs_own_graph():
    source = shipped_configs()["voice-cpu"]
    raw, config = derive_config("fcfs-lru", read_config_data(source), source)
    assert {kind: raw["stages"][kind]["scheduler"]["policy"] for kind in raw["stages"]} == {
        "asr": "fcfs", "thinker": "fcfs", "tts": "fcfs"}
    assert raw["stages"]["thinker"]["kv"]["eviction"] == "lru" and "kv" not in raw["stages"]["tts"]
    assert config.pipeline.tts.scheduler.policy == "fcfs"


def test_presets_on_a_thinker_on_vllm_set_its_scheduler_and_leave_its_kv_to_vllm():
    source = shipped_configs()["voice-cpu-vllm"]
    for name, policy in (("fcfs-nooffload", "fcfs"), ("liveserve-nooffload", "urgency")):
        raw, config = derive_config(name, read_config_data(source), source)
        assert (config.pipeline.thinker.backend, config.pipeline.thinker.scheduler.policy) == ("vllm", policy)
        assert "kv" not in raw["stages"]["thinker"] or raw["stages"]["thinker"]["kv"] is None
    # offloading presets need vLLM's GPU-only transfer worker
    with pytest.raises(PresetUnavailable, match=r"'fcfs-lru' .*stages.thinker.kv.eviction: vLLM offloads KV with a GPU"):
        derive_config("fcfs-lru", read_config_data(source), source)
