"""/metrics as ServerMetrics renders it, against real stage engines' own figures."""

from __future__ import annotations

from lab.prometheus import parse_metrics
from liveserve.realtime.metrics import ServerMetrics
from stages.commands import AddRequest, KVProtectHint, TurnEndingHint
from stages.config import SamplingParams, SchedulerConfig
from stages.factory import build_engine
from stages.interaction import InteractionView, PlaybackState
from stages.models.decoder_config import DecoderConfig
from stages.requests import ThinkerRequest, TurnInput
from stages.stage_spec import KVSpec, StageSpec

DECODER = DecoderConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                        intermediate_size=32, max_position=64)


def playing(buffer_ms: float) -> PlaybackState:
    return PlaybackState(started=True, drained_at=0.0, queued_ms=buffer_ms)


class FixedView(InteractionView):
    """Playback states a test sets (the clock stands at 0); unknown ids have none."""

    def __init__(self, states: dict[str, PlaybackState]) -> None:
        self.states = states

    def playback(self, request_id: str) -> PlaybackState | None:
        return self.states.get(request_id)


def thinker_engine(name: str, policy: str, view: InteractionView):
    spec = StageSpec(name, "thinker", DECODER, SchedulerConfig(policy=policy), KVSpec(num_blocks=16))
    return build_engine(spec, lambda outputs: None, lambda: 0.0, view)


def submit_turn(engine, request_id: str, arrival: float) -> None:
    request = ThinkerRequest(request_id, arrival, stop_ids=frozenset(), max_position=DECODER.max_position)
    request.append(TurnInput([1 + int(arrival), 2, 3], sampling=SamplingParams(temperature=0.0, max_tokens=2,
                                                                                ignore_eos=True)), close=True)
    engine.submit(AddRequest(request))


def run_to_completion(engine, request_ids: list[str]) -> None:
    for i, request_id in enumerate(request_ids):
        submit_turn(engine, request_id, float(i))
    for _ in range(20):
        engine.step()
        if not engine.scheduler.requests:
            return
    raise AssertionError("the requests did not finish")


def test_scheduler_counters_are_exported_per_stage_and_class():
    # One request per urgency class: at risk (u0), waiting for first audio (u1), buffered (u2), buffered
    # past p_yield (yielded while the others wait), no telemetry (fallbacks); then one past p_max (held
    # until its playback catches up).
    view = FixedView({"risk": playing(100.0), "first": PlaybackState(False, 0.0), "mid": playing(500.0),
                      "ahead": playing(1500.0), "far": playing(5000.0)})
    urgency = thinker_engine("thinker", "urgency", view)
    fcfs = thinker_engine("talker", "fcfs", view)
    run_to_completion(urgency, ["risk", "first", "mid", "ahead", "blind"])
    submit_turn(urgency, "far", 9.0)
    urgency.step()
    view.states["far"] = playing(1000.0)
    run_to_completion(urgency, [])
    run_to_completion(fcfs, ["a", "b"])
    counters = urgency.status().policy_counters
    assert all(counters[name] > 0 for name in ("rounds", "u0", "u1", "u2", "fallbacks", "held", "yielded"))

    text = ServerMetrics(lambda: [urgency.status(), fcfs.status()]).render().decode()
    samples = parse_metrics(text)
    assert samples['liveserve_scheduler_rounds_total{stage="thinker"}'] == counters["rounds"]
    exported = {key: value for key, value in samples.items() if key.startswith("liveserve_scheduler_requests_total")}
    assert exported == {f'liveserve_scheduler_requests_total{{class="{name}",stage="thinker"}}': float(value)
                        for name, value in counters.items() if name != "rounds"}
    assert not any('stage="talker"' in key for key in samples if key.startswith("liveserve_scheduler_"))  # fcfs
    assert "# TYPE liveserve_scheduler_rounds_total counter" in text
    assert "# TYPE liveserve_scheduler_requests_total counter" in text


def test_kv_tier_figures_are_exported_for_stages_with_a_host_tier():
    spec = StageSpec("thinker", "thinker", DECODER, SchedulerConfig(),
                     KVSpec(num_blocks=16, eviction="next_use", preload=True))
    tiered = build_engine(spec, lambda outputs: None, lambda: 0.0, None)
    plain = thinker_engine("talker", "fcfs", FixedView({}))
    try:
        request = ThinkerRequest("s", 0.0, stop_ids=frozenset(), max_position=DECODER.max_position)
        request.append(TurnInput([1, 2, 3], sampling=SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)))
        tiered.submit(AddRequest(request))
        for _ in range(5):
            tiered.step()  # the session goes dormant and is written back
        tiered.scheduler.kv.tier.wait_for_transfer(5.0)
        tiered.submit(KVProtectHint("s", lead_s=1.0))
        tiered.submit(TurnEndingHint("s", lead_s=0.25))  # resident: nothing to preload
        tiered.step()
        counters = tiered.status().kv_counters
        samples = parse_metrics(ServerMetrics(lambda: [tiered.status(), plain.status()]).render().decode())
    finally:
        tiered.stop()
    assert counters["stores_bytes"] > 0 and counters["preloads_resident"] == 1 and counters["link_gbps"] > 0
    assert samples['liveserve_kv_transfer_bytes_total{stage="thinker",transfer="stores"}'] == counters["stores_bytes"]
    assert samples['liveserve_kv_preloads_total{outcome="resident",stage="thinker"}'] == 1.0
    assert samples['liveserve_kv_reload_seconds_total{path="critical",stage="thinker"}'] == 0.0
    assert samples['liveserve_kv_link_gbps{stage="thinker"}'] == counters["link_gbps"]
    assert not any('stage="talker"' in key for key in samples if key.startswith("liveserve_kv_") and
                   "block" not in key)  # no host tier: no tier samples (block counts are the stage's)


def test_a_closed_sessions_underruns_and_preemptive_replies_are_counted():
    class Closed:
        num_underruns, num_drafts_taken, num_drafts_dropped = 2, 3, 1

    metrics = ServerMetrics(lambda: [])
    metrics.count_session(Closed())
    metrics.count_session(Closed())
    figures = parse_metrics(metrics.render().decode())
    assert figures["liveserve_playback_underruns_total"] == 4
    assert figures['liveserve_preemptive_replies_total{outcome="taken"}'] == 6
    assert figures['liveserve_preemptive_replies_total{outcome="dropped"}'] == 2
