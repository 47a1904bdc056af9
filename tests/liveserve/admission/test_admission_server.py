"""Admission and the KV forecast in the server: the gate decides who gets in, /metrics shows it all."""

from __future__ import annotations

import asyncio
import math

import pytest
import yaml

from lab.prometheus import parse_metrics
from liveserve.config.loader import load_config
from liveserve.realtime.server import RealtimeServer
from tests.liveserve.realtime.realtime_harness import Client, ServerProcess, connect, refused, small_config


def aimd_config(tmp_path, **admission):
    path = small_config(tmp_path, max_sessions=3)
    data = yaml.safe_load(path.read_text())
    data["admission"] = {"policy": "aimd", "initial_cap": 1, **admission}
    path.write_text(yaml.safe_dump(data))
    return path


def test_frames_feed_the_gate_and_its_adjustments_are_exported(tmp_path):
    server = RealtimeServer(load_config(aimd_config(tmp_path)))  # not started: no stage to sample
    server.sample(0.0)  # the first tick starts the gate's first interval
    for latency in (0.01, 0.02, 0.03):  # under 0.5 x 80 ms
        server.frame_done(latency)
    server.sample(3.0)  # a whole 3-s latency window later; no session live, cap 1: live approaches the cap
    samples = parse_metrics(server.metrics.render().decode())
    assert server.gate.cap == 2 and samples["liveserve_admission_cap"] == 2
    assert samples['liveserve_admission_adjustments_total{action="increase"}'] == 1
    assert samples["liveserve_admission_interval_p99_seconds"] == 0.03
    assert samples["liveserve_duplex_frames_total"] == 3
    assert samples["liveserve_duplex_frame_latency_seconds_count"] == 3
    assert samples["liveserve_duplex_frame_latency_seconds_sum"] == pytest.approx(0.06)


def test_duplex_streams_beyond_the_cap_are_refused_and_metrics_show_the_gate_and_the_pools(tmp_path):
    process = ServerProcess(aimd_config(tmp_path, interval_s=0.5))

    async def scenario():
        async with connect(process) as first, connect(process) as second:
            a, b = Client(first), Client(second)
            await a.next("session.created")
            await b.next("session.created")
            await a.ask("Hello?", max_output_tokens=4)  # turns are not gated: only the stream cap is 1
            await a.next("response.done", timeout=120)
            await a.send("session.update", session={"liveserve": {"duplex": True}})
            await a.next("session.updated")  # the first stream is admitted
            await b.send("session.update", session={"liveserve": {"duplex": True}})
            refusal = await b.next("error")  # the cap is 1: no frames came, so it never rose
            await asyncio.sleep(1.0)  # the sampler runs every 0.5 s
            return refusal, process.metrics()

    try:
        refusal, samples = asyncio.run(scenario())
    finally:
        process.stop()
    assert refusal["error"]["code"] == "session_capacity_exceeded"
    assert refusal["error"]["param"] == "session.liveserve.duplex"
    assert "limit of 1 duplex streams" in refusal["error"]["message"]
    assert samples["liveserve_admission_cap"] == 1
    assert samples['liveserve_admission_decisions_total{decision="admit"}'] == 1
    assert samples['liveserve_admission_decisions_total{decision="reject"}'] == 1
    assert samples["liveserve_rejected_sessions_total"] == 0  # both connections were let in
    assert samples['liveserve_admission_adjustments_total{action="hold"}'] >= 1
    assert 0 < samples['liveserve_kv_occupancy{stage="thinker"}'] < 1  # the sessions' contexts are resident
    assert 'liveserve_kv_occupancy{stage="talker"}' in samples
    assert samples['liveserve_kv_saturation_warning{stage="thinker"}'] == 0
    rate = samples['liveserve_kv_fill_rate{stage="thinker"}']
    t_sat = samples['liveserve_kv_time_to_saturation_seconds{stage="thinker"}']
    assert t_sat > 0 if rate > 0 else math.isnan(t_sat)  # NaN: not filling
    resident = {key: value for key, value in samples.items() if key.startswith("liveserve_session_resident_tokens{")}
    assert set(resident) == {'liveserve_session_resident_tokens{stat="max"}', 'liveserve_session_resident_tokens{stat="mean"}'}
    assert resident['liveserve_session_resident_tokens{stat="max"}'] > 0  # the open sessions' contexts, no id named


def test_connections_beyond_max_sessions_are_refused_whatever_the_stream_gate(tmp_path):
    process = ServerProcess(aimd_config(tmp_path))  # max_sessions 3, stream cap 1

    async def scenario():
        async with connect(process), connect(process), connect(process):
            return await refused(process)

    try:
        rejection, code = asyncio.run(scenario())
    finally:
        process.stop()
    assert rejection["error"]["code"] == "session_capacity_exceeded" and code == 1013
    assert "limit of 3 sessions" in rejection["error"]["message"]
