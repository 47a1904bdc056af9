"""benchmarks/robustness.py: the seeded scenario sampler, the samples it writes, the summary's verdicts, and a
tiny grid end to end in the simulator."""

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import robustness
from robustness_confirm import pick
from robustness_scenarios import (
    ARRIVALS,
    GAMMA_SHAPES,
    MIN_SHARE,
    POISSON_RATES,
    SOURCES,
    SPOKEN_MAX_PROMPT,
    USERS,
    draw_scenario,
    draw_scenarios,
)
from robustness_summary import criteria, scenario_entry, summarize
from robustness_workloads import SERVED_BLOCKS, Exchange, fits_blocks, largest_session_blocks, write_workload

from lab.workloads import load_burstgpt, load_interactive, load_sharegpt
from stages.models.tokenizer import TextTokenizer


def test_the_sampler_is_deterministic_per_seed_and_a_grid_is_a_prefix_of_a_larger_one():
    grid = draw_scenarios(5, 40)
    assert grid == draw_scenarios(5, 40)
    assert draw_scenarios(5, 10) == grid[:10]
    assert draw_scenarios(6, 40) != grid
    assert [s.index for s in grid] == list(range(40))


def test_the_sampler_covers_every_dimension_s_range():
    grid = draw_scenarios(11, 400)
    assert {s.source for s in grid} == set(SOURCES)
    assert {s.arrival for s in grid} == set(ARRIVALS)
    assert {s.request_rate for s in grid if s.arrival == "poisson"} == set(POISSON_RATES)
    assert {s.burstiness for s in grid if s.arrival == "gamma"} == set(GAMMA_SHAPES)
    assert all(math.isinf(s.request_rate) for s in grid if s.arrival == "at-once")
    users = [s.users for s in grid]
    assert USERS[0] <= min(users) <= 5 and 58 <= max(users) <= USERS[1]
    barge_in = [s.barge_in_prob for s in grid]
    assert 0 <= min(barge_in) < 0.05 and 0.65 < max(barge_in) <= 0.7
    shares = [s.pool_share for s in grid]
    assert 1.0 in shares and MIN_SHARE <= min(shares) < 0.3
    assert {s.spoken for s in grid} == {s.hold_until_heard for s in grid} == {True, False}
    assert all(s.prompt_tokens[1] <= SPOKEN_MAX_PROMPT for s in grid if s.spoken)
    assert {s.turns for s in grid if s.source == "interactive"} == {2, 3, 4, 5}
    assert all(s.turns == 1 for s in grid if s.source != "interactive")
    assert all(1 <= s.total_requests <= 128 and s.prompt_tokens[0] <= s.prompt_tokens[1] for s in grid)


def _first(source: str):
    return next(s for s in (draw_scenario(3, i) for i in range(200)) if s.source == source)


@pytest.mark.parametrize("source, loader", [("burstgpt", load_burstgpt), ("interactive", load_interactive)])
def test_a_generated_sample_reads_back_in_its_published_format(tmp_path, source, loader):
    scenario = _first(source)
    workload = write_workload(scenario, tmp_path, pool=[])
    requests = loader(workload.path, TextTokenizer.default())
    assert len(requests) == workload.num_requests == scenario.total_requests
    lengths = [(r.prompt_tokens, r.response_tokens) for r in requests]
    assert sorted(lengths) == sorted(turn for turns in workload.sessions for turn in turns)
    assert all(scenario.prompt_tokens[0] <= p <= scenario.prompt_tokens[1] for p, _ in lengths)
    assert all(scenario.reply_tokens[0] <= r <= scenario.reply_tokens[1] for _, r in lengths)


def test_a_sharegpt_sample_keeps_the_conversations_inside_its_length_mix(tmp_path):
    tokenizer = TextTokenizer.default()
    pool = [_exchange(i, "word " * n, "reply " * m, tokenizer) for i, (n, m) in enumerate([(5, 20)] * 30 + [(200, 20)])]
    scenario = replace(_first("sharegpt"), prompt_tokens=(4, 48), reply_tokens=(4, 200), num_requests=16)
    workload = write_workload(scenario, tmp_path, pool)
    requests = load_sharegpt(workload.path, tokenizer)
    assert len(requests) == 16 and all(r.prompt_tokens <= 48 for r in requests)


def _exchange(index, prompt, reply, tokenizer):
    entry = {"id": f"c{index}", "conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": reply}]}
    return Exchange(entry, len(tokenizer.encode_literal(prompt)), len(tokenizer.encode_literal(reply)))


def test_pools_that_fit_hold_the_sessions_in_flight_and_never_less_than_served(tmp_path):
    workload = write_workload(_first("interactive"), tmp_path, pool=[])
    fits, largest = fits_blocks(workload, users=64, spoken=True), largest_session_blocks(workload, spoken=True)
    assert set(fits) == {"thinker", "talker"}
    assert all(fits[stage] >= max(SERVED_BLOCKS, largest[stage]) for stage in fits)
    assert fits_blocks(workload, users=1, spoken=False)["thinker"] == SERVED_BLOCKS


def _outcome(fcfs_p90, shipped_p90, unloaded_p90, fcfs_continuity=1.0, shipped_continuity=1.0):
    def run(p90, continuity):
        return {"ttfp_p90_ms": p90, "continuity": continuity, "wall_s": 1.0}
    return {"pools": {"thinker": 2048, "talker": 2048}, "working_set": None,
            "runs": {"fcfs-lru": run(fcfs_p90, fcfs_continuity), "liveserve": run(shipped_p90, shipped_continuity),
                     "unloaded": run(unloaded_p90, 1.0)}}


def test_an_entry_s_ratio_load_and_continuity_delta():
    scenario = draw_scenario(1, 0)
    entry = scenario_entry(scenario, _outcome(200.0, 100.0, 100.0, 0.9, 0.95))
    assert entry["p90_ratio"] == 0.5 and entry["loaded"] is True
    assert entry["continuity_delta"] == pytest.approx(0.05)
    assert entry["parameters"]["index"] == 0 and "runs" in entry
    assert scenario_entry(scenario, _outcome(199.0, 100.0, 100.0))["loaded"] is False
    assert "error" in scenario_entry(scenario, _outcome(200.0, None, 100.0))
    json.dumps(scenario_entry(draw_scenario(1, 3), _outcome(1.0, 1.0, 1.0)), allow_nan=False)  # inf rates as "inf"


def test_on_several_machines_an_entry_compares_mean_p90s_and_its_floor_is_fcfs_on_the_others():
    def run(p90, continuity=1.0):
        return {"ttfp_p90_ms": p90, "continuity": continuity, "wall_s": 1.0}
    runs = {"fcfs-lru": run(100.0), "fcfs-lru@1": run(300.0, 0.9), "liveserve": run(150.0), "liveserve@1": run(150.0),
            "fcfs-lru@2": run(240.0), "fcfs-lru@3": run(200.0), "unloaded": run(50.0)}
    outcome = {"pools": {}, "working_set": None, "machines": 2, "runs": runs}
    entry = scenario_entry(draw_scenario(1, 0), outcome)
    assert entry["p90_ratio"] == pytest.approx(0.75) and entry["loaded"] is True  # 150 / 200; 200 >= 2 x 50
    assert entry["continuity_delta"] == pytest.approx(0.05) and entry["floor_ratio"] == pytest.approx(1.1)
    del runs["fcfs-lru@2"], runs["fcfs-lru@3"]
    assert scenario_entry(draw_scenario(1, 0), outcome)["floor_ratio"] is None
    floors = _entries([(1.0, False)] * 4)
    for entry, floor in zip(floors, (0.9, 1.0, 1.1, 1.3)):
        entry["floor_ratio"] = floor
    summary = summarize(floors)
    assert summary["floor_share_ratio_le_1_05"] == 0.5 and summary["floor_max_ratio"] == 1.3
    assert summary["floor_share_ratio_le_1_15"] == 0.75 and summary["floor_median_ratio"] == pytest.approx(1.05)


def _entries(ratios_loaded, deltas=None):
    deltas = deltas or [0.0] * len(ratios_loaded)
    return [{"index": i, "parameters": draw_scenario(2, i).__dict__ | {"request_rate": 1.0}, "p90_ratio": ratio,
             "loaded": loaded, "continuity_delta": delta}
            for i, ((ratio, loaded), delta) in enumerate(zip(ratios_loaded, deltas))]


def test_aggregates_and_criteria_on_a_hand_made_grid():
    # 20 scenarios: 10 loaded at 0.5 and 0.6, 8 unloaded at 1.0, one at 1.1 and one at 1.2 (both over 1.05)
    ratios = [(0.5, True)] * 5 + [(0.6, True)] * 5 + [(1.0, False)] * 8 + [(1.1, False), (1.2, False)]
    summary = summarize(_entries(ratios, deltas=[0.0] * 19 + [-0.03]))
    assert summary["num_scenarios"] == 20 and summary["num_loaded"] == 10 and summary["num_errors"] == 0
    assert summary["share_ratio_le_1_05"] == pytest.approx(0.9)
    assert summary["max_ratio"] == 1.2 and summary["loaded_median_ratio"] == pytest.approx(0.55)
    assert summary["min_continuity_delta"] == -0.03
    assert summary["criteria"] == {"ratio_le_1_05_in_95pct": False, "ratio_le_1_15_in_all": False,
                                   "loaded_median_le_0_7": True, "continuity_drop_le_0_02": False, "all_hold": False}
    assert summary["regions"]["source"] and sum(r["scenarios"] for r in summary["regions"]["users"].values()) == 20


def test_every_criterion_holds_on_a_safe_grid_and_an_error_still_fails_it():
    ratios = [(0.6, True)] * 19 + [(1.1, False)]
    assert summarize(_entries(ratios))["criteria"]["all_hold"] is True
    with_error = _entries(ratios) + [{"index": 20, "parameters": {}, "error": "boom"}]
    summary = summarize(with_error)
    assert summary["num_errors"] == 1 and summary["criteria"]["all_hold"] is False


def test_no_loaded_scenario_leaves_the_loaded_criterion_open():
    aggregates = {"share_ratio_le_1_05": 1.0, "max_ratio": 1.0, "loaded_median_ratio": None,
                  "min_continuity_delta": 0.0, "num_errors": 0}
    verdicts = criteria(aggregates)
    assert verdicts["loaded_median_le_0_7"] is None and verdicts["all_hold"] is False


def test_confirmations_pick_the_worst_k_then_k_others_by_seed():
    entries = _entries([(r, False) for r in (0.5, 1.3, 0.9, 1.1, 0.7, 0.8)])
    picked = pick(entries, 2, seed=1)
    assert [(reason, e["p90_ratio"]) for reason, e in picked[:2]] == [("worst", 1.3), ("worst", 1.1)]
    assert [reason for reason, _ in picked[2:]] == ["random", "random"]
    assert {e["index"] for _, e in picked[2:]} <= {0, 2, 4, 5} and picked == pick(entries, 2, seed=1)


def _quick_seed() -> int:
    """A grid whose first two scenarios need no ShareGPT file (not in git) and speak no prompt (quicker)."""
    return next(seed for seed in range(1000)
                if all(s.source != "sharegpt" and not s.spoken for s in draw_scenarios(seed, 2)))


def test_a_tiny_grid_runs_end_to_end_and_writes_its_summary(tmp_path):
    grid = ["--seed", str(_quick_seed()), "--scenarios", "2", "--max-requests", "2", "--out", str(tmp_path)]
    status = robustness.main([*grid, "--trace"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert status == (0 if summary["criteria"]["all_hold"] else 1)
    assert [e["index"] for e in summary["scenarios"]] == [0, 1] and summary["num_errors"] == 0
    assert summary["spec"] == "configs/sim/tiny-omni-cpu.yaml"  # no folder of this machine
    for entry in summary["scenarios"]:
        assert {"parameters", "p90_ratio", "loaded", "continuity_delta", "pools", "runs"} <= set(entry)
        assert {"fcfs-lru", "liveserve", "unloaded"} <= set(entry["runs"])
        assert (tmp_path / "scenarios" / f"{entry['index']:03d}" / "trace" / "liveserve" / "thinker.jsonl").is_file()
    assert (tmp_path / "ratios.png").stat().st_size > 0
    # again, scenario 1 alone: its entry is there, so nothing runs and the summary holds it alone
    robustness.main([*grid, "--only", "1"])
    again = json.loads((tmp_path / "summary.json").read_text())
    assert again["scenarios"] == summary["scenarios"][1:]
    # on two machines with a floor: scenario 1 runs again, each policy on machines 0 and 1, FCFS on 2 and 3
    robustness.main([*grid, "--only", "1", "--machines", "2", "--floor"])
    entry = json.loads((tmp_path / "summary.json").read_text())["scenarios"][0]
    assert entry["machines"] == 2 and entry["floor_ratio"] is not None
    assert {"fcfs-lru", "fcfs-lru@1", "fcfs-lru@2", "fcfs-lru@3", "liveserve", "liveserve@1"} <= set(entry["runs"])
    assert "liveserve@2" not in entry["runs"]


def test_a_variant_of_the_shipped_policies_runs_alone_against_a_baseline_grid_s_fcfs_runs(tmp_path):
    grid = ["--seed", str(_quick_seed()), "--scenarios", "2", "--max-requests", "2"]
    robustness.main([*grid, "--out", str(tmp_path / "base")])
    base = json.loads((tmp_path / "base" / "summary.json").read_text())
    pacing_off = "stages.thinker.scheduler.urgency.p_max_ms=.inf"
    robustness.main([*grid, "--out", str(tmp_path / "variant"), "--set", pacing_off,
                     "--baseline", str(tmp_path / "base")])
    variant = json.loads((tmp_path / "variant" / "summary.json").read_text())
    assert variant["set"] == [pacing_off] and variant["num_errors"] == 0
    for before, after in zip(base["scenarios"], variant["scenarios"]):
        assert after["set"] == [pacing_off] and after["pools"] == before["pools"]
        fcfs = {name: run for name, run in before["runs"].items() if name != "liveserve"}
        assert {name: run for name, run in after["runs"].items() if name != "liveserve"} == fcfs  # reused, wall_s too
    # the setting reaches the shipped policies' runs: one they refuse makes each scenario an error
    refusal = "stages.thinker.scheduler.urgency.p_safe_ms=-1"
    robustness.main([*grid, "--out", str(tmp_path / "refused"), "--set", refusal, "--baseline", str(tmp_path / "base")])
    refused = json.loads((tmp_path / "refused" / "summary.json").read_text())
    assert refused["num_errors"] == 2 and all("p_safe_ms" in e["error"] for e in refused["scenarios"])


@pytest.mark.parametrize("flags, message", [
    (["--set", "no-equals-sign"], "expected KEY.PATH=VALUE"),
    (["--baseline", "nowhere"], "no grid there"),
])
def test_a_bad_variant_flag_is_refused_by_name(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        robustness.main(["--seed", "1", "--out", str(tmp_path), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_confirmation_of_several_pairs_alternates_their_order_and_takes_the_median_ratio(monkeypatch):
    import robustness_confirm

    p90s = iter([100.0, 50.0, 90.0, 200.0, 100.0, 80.0])  # pair ratios 0.5, 0.45 (shipped first), 0.8
    order = []

    def fake_replay(options):
        order.append(options.policy)
        return {"p90": next(p90s)}

    monkeypatch.setattr(robustness_confirm, "replay", fake_replay)
    monkeypatch.setattr(robustness_confirm, "replay_options",
                        lambda scenario, workload, policy, *rest: SimpleNamespace(policy=policy))
    monkeypatch.setattr(robustness_confirm, "run_figures", lambda result: {"ttfp_p90_ms": result["p90"]})
    entry = {"index": 7, "p90_ratio": 0.6, "pools": {"thinker": 1, "talker": 1}}
    confirmation = robustness_confirm.confirm_one(draw_scenario(1, 7), None, entry, "worst", False, pairs=3)
    assert order == ["fcfs-lru", "liveserve", "liveserve", "fcfs-lru", "fcfs-lru", "liveserve"]
    assert [pair["ratio"] for pair in confirmation["pairs"]] == [0.5, 0.45, 0.8]
    assert confirmation["real_ratio"] == 0.5 and confirmation["agrees"]
    assert confirmation["difference"] == pytest.approx(-0.1)

