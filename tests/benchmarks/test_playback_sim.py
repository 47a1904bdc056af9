"""The alpha/beta sweep's simulation: playback and waste accounting on hand-checked cases, and the grid's dedup."""

from __future__ import annotations

import math

import pytest
from playback_sim import Reply, SessionPlan, Simulation, StageModel, Turn, Workload
from urgency_alpha_beta import setting_key, summarize

from stages.config import SchedulerConfig
from stages.policies.urgency import UrgencyParams

MS = 240.0  # audio per token
FLAT = StageModel(step_base_s=0.1, step_per_token_s=0.0)  # every round takes 0.1 s


def simulate(turn: Turn, stage: StageModel = FLAT, policy: str = "urgency"):
    """One session of one turn (a 4-token prompt) arriving at t=0."""
    simulation = Simulation([SessionPlan("s", 0.0, (turn,))], Workload(), stage, SchedulerConfig(policy=policy))
    return simulation, simulation.run()


def test_a_pausing_player_counts_the_time_it_waits_after_first_audio():
    reply = Reply(Turn(4, 3, gap_s=1.0), started_at=0.5, context_tokens=4, ms_per_token=MS)
    reply.deliver(1.0)  # first audio: plays 1.00-1.24
    reply.deliver(1.1)  # queued behind it: plays 1.24-1.48
    assert (reply.stall_s, reply.drained_at) == (0.0, pytest.approx(1.48))
    assert reply.played_ms(1.3) == pytest.approx(300.0)
    reply.deliver(1.6)  # dry since 1.48: a 0.12 s underrun, then 1.60-1.84
    assert (reply.stall_s, reply.drained_at) == (pytest.approx(0.12), pytest.approx(1.84))
    assert reply.played_ms(1.7) == pytest.approx(3 * MS - 140.0)


def test_a_reply_the_stage_keeps_up_with_plays_without_underrun():
    simulation, result = simulate(Turn(4, 3, gap_s=1.0))
    reply, = result.replies
    # Rounds: prefill 4 + token 1 at 0.1, token 2 at 0.2, token 3 at 0.3, then token 3's own KV (no sample).
    assert (reply.first_audio_at, reply.num_generated, reply.stall_s) == (pytest.approx(0.1), 3, 0.0)
    assert reply.ended_at == pytest.approx(0.1 + 3 * MS / 1000)  # played out at 0.82; the session closes
    assert (result.num_rounds, result.num_computed, result.busy_s) == (4, 7, pytest.approx(0.4))
    assert result.end_s == pytest.approx(0.82) and not simulation.scheduler.requests
    figures = summarize(result)
    assert (figures["underrun_pct"], figures["ttfa_p90_s"], figures["waste_pct"]) == (0.0, pytest.approx(0.1), 0.0)


def test_a_slow_stage_underruns_between_tokens():
    _, result = simulate(Turn(4, 3, gap_s=1.0), StageModel(step_base_s=0.3, step_per_token_s=0.0))
    reply, = result.replies
    # Tokens at 0.3, 0.6, 0.9; each plays 0.24 s, so the player waits 0.06 s before tokens 2 and 3.
    assert reply.stall_s == pytest.approx(0.12) and reply.ended_at == pytest.approx(1.14)
    assert summarize(result)["underrun_pct"] == pytest.approx(100 * 0.12 / (1.14 - 0.3))


def test_a_barge_in_keeps_what_was_heard_and_counts_the_rest_as_wasted():
    simulation, result = simulate(Turn(4, 10, gap_s=1.0, barge_at=0.2))
    reply, = result.replies
    # The cut is at 20 % of 10 tokens' audio = 480 ms, reached at 0.1 + 0.48 = 0.58 s: tokens 1-2 were heard.
    # It is seen at the round that starts at 0.6, after token 6 arrived: 4 tokens wasted.
    assert reply.cut_at == pytest.approx(0.58) and reply.ended_at == pytest.approx(0.58)
    assert (reply.num_generated, reply.num_heard, reply.num_wasted) == (6, 2, 4)
    assert list(simulation.requests["s"].token_ids) == [1, 1, 1, 1, 7, 7]  # the context keeps prompt + heard tokens
    assert summarize(result)["waste_pct"] == pytest.approx(100 * 4 / 6)


def test_scaling_alpha_and_beta_together_runs_the_same_policy():
    assert setting_key(1, 1) == setting_key(0.25, 0.25) == "a/b=1" and setting_key(1, 0.25) == "a/b=4"
    assert (setting_key(0, 2), setting_key(2, 0), setting_key(0, 0)) == ("beta only", "alpha only", "given order")
    sessions = [SessionPlan(f"s{i}", 0.05 * i, (Turn(30, 40, 0.5, barge_at=0.5 if i % 3 == 0 else None),
                                               Turn(20, 25, 0.5))) for i in range(12)]
    stage = StageModel(max_num_seqs=4, kv_blocks=40)  # overloaded, and short of KV
    # Nothing yields and little is held, so U2 is long enough for its order to matter.
    configs = [SchedulerConfig(policy="urgency", params=UrgencyParams(alpha=a, beta=b, p_yield_ms=math.inf,
                                                                      p_max_ms=math.inf))
               for a, b in ((1.0, 1.0), (4.0, 4.0), (1.0, 0.25))]
    runs = [summarize(Simulation(sessions, Workload(), stage, config).run()) for config in configs]
    assert runs[0] == runs[1] and runs[2] != runs[0]  # the same ratio, the same run; another ratio, another
    assert runs[0]["preemptions"] > 0 and runs[0]["underrun_pct"] > 0
