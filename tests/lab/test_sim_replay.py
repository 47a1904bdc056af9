"""`bench replay --simulate`: the real server, client and policies in virtual time over priced steps."""

import json
from pathlib import Path

import pytest

from lab.replay.command import format_summary
from lab.replay.options import ReplayOptions
from lab.sim.replay import run_simulated_replay
from lab.sim.runner import SimulatedRunner
from stages.policies.urgency import UrgencyPolicy

SPEC = str(Path(__file__).resolve().parents[2] / "configs" / "sim" / "qwen3-omni-1xh200.yaml")


def replay(**fields) -> dict:
    fields = {"num_requests": 12, "max_concurrency": 6, "random_output_len": 24, "simulate": SPEC, **fields}
    return run_simulated_replay(ReplayOptions(**fields), log=open("/dev/null", "w"))


def figures(result: dict) -> list:
    return [(r["request_id"], r["status"], r["first_audio_s"], r["audio_ms"], r["e2e_s"]) for r in result["requests"]]


def test_same_seed_same_run_different_seed_different_run():
    first, again = replay(barge_in_prob=0.5, seed=3), replay(barge_in_prob=0.5, seed=3)
    assert figures(first) == figures(again)
    assert figures(replay(barge_in_prob=0.5, seed=4)) != figures(first)


CPU_SPEC = str(Path(SPEC).with_name("tiny-omni-cpu.yaml"))  # its steps are noisy


def test_one_machine_seed_one_machine_another_seed_another():
    first, again = (replay(simulate=CPU_SPEC, machine_seed=1) for _ in range(2))
    assert figures(first) == figures(again) and first["config"]["machine_seed"] == 1
    assert first["simulated"]["server_loop"]["busy_s"] > 0  # the CPU spec prices the server's loop
    assert figures(replay(simulate=CPU_SPEC, machine_seed=2)) != figures(first)
    with pytest.raises(ValueError, match="machine_seed draws a simulated machine: only with simulate"):
        ReplayOptions(machine_seed=1)


def test_result_says_simulated_and_on_what():
    result = replay(policy="liveserve")
    assert result["num_completed"] == 12 and result["num_failed"] == 0
    simulated = result["simulated"]
    assert simulated["spec"] == "qwen3-omni-1xh200" and simulated["devices"] == ["H200"]
    assert "calibration" in simulated and simulated["stages"]["thinker"]["params"] > 30e9
    assert simulated["server_loop"] == {"busy_s": 0.0, "wait_ms": {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}}
    assert result["audio_ttfp_ms"]["p50"] > 0 and result["config"]["preset"]


def test_barge_in_cuts_replies_through_the_real_server_vad():
    """Speaking the barge-in clip over a playing reply (cut at another reply's length: the lengths vary)
    makes the server's VAD truncate it: the unheard part is reported as wasted."""
    result = replay(barge_in_prob=1.0, random_output_len=64, random_range_ratio=0.5, num_requests=6)
    assert result["wasted_token_ratio"] > 0
    assert any(r["unheard_text_tokens"] > 0 for r in result["requests"])


def test_barged_in_requests_are_counted_apart_and_printed():
    """A barge-in while the reply is still generating (the urgency policy holds a reply's generation to
    a playback buffer ahead) cancels it: neither completed nor failed, so the summary names the cancelled
    count beside the two (the three add up to the requests replayed)."""
    result = replay(barge_in_prob=1.0, random_output_len=64, random_range_ratio=0.5, hold_until_heard=True,
                    policy="liveserve")
    statuses = [r["status"] for r in result["requests"]]
    assert result["num_cancelled"] == statuses.count("cancelled") > 0
    assert result["num_completed"] + result["num_cancelled"] + result["num_failed"] == 12
    counts = f"{result['num_completed']} / {result['num_cancelled']} / {result['num_failed']}"
    assert f"Requests (completed / barged in / failed)  {counts}" in format_summary(result)


def test_the_real_urgency_policy_and_the_simulated_runner_run(monkeypatch):
    orders, steps = [], []
    real_order, real_execute = UrgencyPolicy.order, SimulatedRunner.execute
    monkeypatch.setattr(UrgencyPolicy, "order", lambda self, *a: orders.append(1) or real_order(self, *a))
    monkeypatch.setattr(SimulatedRunner, "execute", lambda self, plan: steps.append(1) or real_execute(self, plan))
    replay(policy="liveserve", num_requests=4)
    assert orders and steps


def test_memory_pressure_offloads_to_the_host_over_the_link():
    """A thinker pool a few sessions' KV fills, replies paced whatever the pool (`pace_kv_share` .inf): the
    next-use policy evicts held replies' KV to the host and reloads it over the link. (Paced only while the pool
    affords it, as shipped, these replies are not held once the new turns would not fit: nothing comes back.)"""
    result = replay(policy="liveserve", dataset="random", random_input_len=400, num_requests=16, max_concurrency=8,
                    overrides=_overrides("stages.thinker.kv.num_blocks=120",
                                         "stages.thinker.scheduler.urgency.pace_kv_share=.inf"))
    assert result["num_failed"] == 0
    assert result["kv"]["evictions"] > 0 and result["kv"]["reload_ms_on_path"] > 0


def _overrides(*texts):
    from liveserve.config.document import Override

    return tuple(Override.parse(t) for t in texts)


def test_runtime_trace_dir_writes_each_stage_s_steps_in_virtual_time(tmp_path):
    """`--set runtime.trace_dir=DIR` traces a simulated run as a real one: a line per step that did something,
    its clock and its step time virtual (a step's time is its price, not the wall time it took to simulate)."""
    replay(num_requests=4, overrides=_overrides(f"runtime.trace_dir={tmp_path}"))
    steps = [json.loads(line) for line in (tmp_path / "thinker.jsonl").read_text().splitlines()]
    assert steps and all(step["t"] >= 0 for step in steps)
    ran = [step for step in steps if step["run"]]
    assert ran and all(step["dt"] > 0 for step in ran)
    assert {path.name for path in tmp_path.iterdir()} >= {"encoder.jsonl", "talker.jsonl", "vocoder.jsonl",
                                                          "responses.jsonl"}


def test_a_node_spec_runs_a_replica_of_each_stage_per_gpu(monkeypatch):
    """qwen3-omni-8xh200: eight concurrent sessions spread over the eight thinker replicas (the real
    ReplicatedPlacement's least-loaded routing), each replica's steps priced on its own GPU."""
    runners: dict[str, set] = {}
    real_execute = SimulatedRunner.execute

    def record(self, plan):
        if plan.chunks:
            runners.setdefault(self.kind, set()).add(id(self))
        return real_execute(self, plan)

    monkeypatch.setattr(SimulatedRunner, "execute", record)
    result = replay(simulate=str(Path(SPEC).with_name("qwen3-omni-8xh200.yaml")), num_requests=8, max_concurrency=8)
    assert result["num_completed"] == 8 and result["simulated"]["devices"] == ["H200"] * 8
    assert len(runners["thinker"]) == len(runners["talker"]) == 8


def test_the_voice_llm_spec_serves_a_thinker_only_graph_with_text_timings():
    """voice-llm-8xh200 prices a text-in, text-out thinker as the 70B on four TP-2 replicas: the replies'
    text deltas time the TTFT (there is no audio to time)."""
    config = Path(SPEC).parents[1] / "smollm2-text-cpu.yaml"
    result = replay(simulate=str(Path(SPEC).with_name("voice-llm-8xh200.yaml")), config=config, policy="liveserve",
                    num_requests=8, max_concurrency=8, random_input_len=500)
    assert result["num_completed"] == 8 and result["simulated"]["devices"] == ["2xH200"] * 4
    assert result["text_ttft_ms"]["p50"] > 0 and result["audio_ttfp_ms"]["p50"] is None


def test_stages_of_a_device_that_does_not_take_turns_compute_at_once(monkeypatch):
    """tiny-omni-cpu (stages_take_turns off): each engine holds a lock of its own; an H200's share one."""
    from lab.sim.virtual_engine import VirtualEngine

    locks: dict[str, list] = {}
    real_start = VirtualEngine.start

    def record(self):
        locks.setdefault(self.engine.runner.device.name, []).append(self.device)
        return real_start(self)

    monkeypatch.setattr(VirtualEngine, "start", record)
    replay(num_requests=2)
    replay(simulate=str(Path(SPEC).with_name("tiny-omni-cpu.yaml")), num_requests=2)
    assert len(locks["H200"]) == 4 and len(set(map(id, locks["H200"]))) == 1
    assert len(locks["cpu"]) == 4 and len(set(map(id, locks["cpu"]))) == 4
