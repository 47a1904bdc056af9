"""tools/device_check.py on the CPU: its dry run does every section at tiny size and reports figures a GPU run would;
the deadline skips what would not fit, a failing section does not stop the others, and the claim's ramp stops at
the load that slows FCFS down (or at the deadline) and runs the shipped policies there."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lab.device_check import claim
from lab.device_check.claim import ClaimPlan, run_claim
from lab.device_check.deadline import Deadline
from lab.device_check.run import DRY_RUN, SHARES
from lab.device_check.run import sections as check_sections
from lab.device_check.sections import Section, Skipped, run_section, run_sections
from lab.device_check.wheels import unpack
from lab.sim.spec import shipped_specs
from liveserve.config import deployment, loader
from liveserve.config.deployment import require_runnable
from liveserve.config.document import Override
from liveserve.plan_command import plan

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "device_check.py"
SECTIONS = ("parity", "engine", "kv_tier", "claim")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("device_check")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "device_check.json").read_text()), out


def test_the_dry_run_runs_every_section_on_the_cpu(dry_run):
    report, out = dry_run
    assert report["device"]["name"] == "cpu (dry run)" and report["seconds"] > 0 and report["started"]
    for name in SECTIONS:
        assert (report[name]["status"], report[name]["dry_run"]) == ("ran", True), report[name]
    markdown = (out / "device_check.md").read_text()
    assert all(f"## {name}" in markdown for name in SECTIONS)


def test_parity_of_the_cpu_with_itself_is_exact(dry_run):
    parity = dry_run[0]["parity"]
    assert parity["equal"] and parity["float32"]["audio_max_abs_diff"] == 0.0
    low = parity["low_precision"]  # thinker and talker in bf16 on the CPU: a turn, compared, not required equal
    assert (low["status"], low["dtype"], low["turn_status"], low["text_tokens"]) == ("ran", "bfloat16", "incomplete", 8)
    assert parity["qwen3_omni"]["status"] == "ran" and parity["qwen3_omni"]["equal"]


def test_engine_rates_are_positive_and_priced_for_each_depth_and_batch(dry_run):
    engine = dry_run[0]["engine"]
    measured = {(row["depth"], row["batch"]): row for row in engine["measured"]}
    assert set(measured) == {(1, 1), (2, 1), (1, 2), (2, 2)}
    for row in engine["measured"] + engine["full_depth_estimate"]:
        for phase in ("prefill", "decode"):
            assert row[f"{phase}_tok_s"] > 0 and row[f"roofline_{phase}_tok_s"] > 0
            assert row[f"{phase}_over_simulated"] > 0
    assert [row["depth"] for row in engine["full_depth_estimate"]] == [engine["full_depth"]] * 2


def test_the_kv_tier_copies_both_ways_and_a_load_finishes_while_the_engine_decodes(dry_run):
    kv_tier = dry_run[0]["kv_tier"]
    assert all(row["store_gbytes_s"] > 0 and row["load_gbytes_s"] > 0 for row in kv_tier["bandwidth"])
    overlap = kv_tier["overlap"]
    assert overlap["status"] == "ran" and overlap["load_finished"] and overlap["steps_during_load_s"] > 0


def test_the_claim_replays_fcfs_then_the_shipped_policies_at_its_load(dry_run):
    result = dry_run[0]["claim"]
    assert result["unloaded"]["users"] == 1 and result["baseline"]["users"] == result["shipped"]["users"] == 2
    assert (result["baseline"]["preset"], result["shipped"]["preset"]) == ("fcfs-lru", "liveserve")
    for run in (result["unloaded"], result["baseline"], result["shipped"]):
        assert run["p90_ttfp_ms"] > 0 and run["num_failed"] == 0 and run["continuity_ok_rate"] is not None
    assert result["p90_ttfp_ratio"] > 0


def ticking(clock: FakeClock, seconds: float, figures: dict | None = None):
    """A section's run that takes `seconds` of the fake clock and returns `figures`."""
    def run(deadline: Deadline) -> dict:
        clock.now += seconds
        return dict(figures or {}, deadline_left_s=deadline.left_s)
    return run


def test_a_section_that_would_not_fit_is_skipped_saying_so_and_the_next_that_fits_runs():
    clock = FakeClock()
    sections = [Section("first", ticking(clock, 70.0), min_s=10.0), Section("second", ticking(clock, 1.0), min_s=40.0),
                Section("third", ticking(clock, 5.0), min_s=20.0)]
    results = run_sections(sections, Deadline(100.0, clock))
    assert [results[name]["status"] for name in ("first", "second", "third")] == ["ran", "skipped", "ran"]
    assert results["second"]["reason"] == "second needs about 40 s and 30 s are left of the budget"
    assert results["first"]["seconds"] == 70.0 and clock.now == 75.0


def test_a_section_runs_within_its_cap_of_the_deadline():
    clock = FakeClock()
    result = run_section(Section("capped", ticking(clock, 1.0), min_s=1.0, cap_s=30.0), Deadline(100.0, clock))
    assert result["deadline_left_s"] == 29.0  # its deadline: 30 s from its start, nearer than the run's 100 s
    result = run_section(Section("uncapped", ticking(clock, 1.0), min_s=1.0), Deadline(10.0, clock))
    assert result["deadline_left_s"] == 9.0


def test_a_failing_section_is_reported_with_its_last_line_and_the_others_still_run():
    clock = FakeClock()

    def fails(deadline: Deadline) -> dict:
        clock.now += 2.0
        raise RuntimeError("the GPU fell off\nsecond line: out of memory")

    def skips(deadline: Deadline) -> dict:
        raise Skipped("not on this machine")

    sections = [Section("broken", fails, 1.0), Section("absent", skips, 1.0),
                Section("fine", ticking(clock, 1.0, {"figure": 3}), 1.0)]
    results = run_sections(sections, Deadline(100.0, clock))
    broken = results["broken"]
    assert (broken["status"], broken["reason"], broken["seconds"]) == (
        "failed", "RuntimeError: the GPU fell off ... second line: out of memory", 2.0)
    assert "Traceback" in broken["traceback"]
    assert results["absent"] == {"status": "skipped", "reason": "not on this machine"}
    assert (results["fine"]["status"], results["fine"]["figure"]) == ("ran", 3)


PLAN = ClaimPlan((), (2, 4, 8, 16), requests_per_user=2, unloaded_requests=4, input_len=8, output_len=4,
                 barge_in_prob=0.0, first_run_s=10.0)


def fake_replays(monkeypatch, clock: FakeClock, p90_ms: dict[tuple[str, int], float], seconds: float) -> list:
    """Replays whose P90 TTFP is `p90_ms[preset, users]`, each taking `seconds`; the runs, in order."""
    runs = []

    def run(self, preset: str, users: int, requests: int) -> dict:
        clock.now += seconds
        runs.append((preset, users, requests))
        return {"preset": preset, "users": users, "requests": requests, "p90_ttfp_ms": p90_ms[preset, users],
                "seconds": seconds}

    monkeypatch.setattr(claim.Replays, "run", run)
    return runs


def test_the_ramp_stops_where_fcfs_doubles_and_the_shipped_policies_run_at_that_load(monkeypatch, tmp_path):
    clock = FakeClock()
    p90 = {("fcfs-lru", 1): 50.0, ("fcfs-lru", 2): 60.0, ("fcfs-lru", 4): 110.0, ("liveserve", 4): 70.0}
    runs = fake_replays(monkeypatch, clock, p90, seconds=10.0)
    result = run_claim(PLAN, Deadline(1000.0, clock), tmp_path)
    assert runs == [("fcfs-lru", 1, 4), ("fcfs-lru", 2, 4), ("fcfs-lru", 4, 8), ("liveserve", 4, 8)]
    assert result["reached_slowdown"] and result["target_p90_ttfp_ms"] == 100.0
    assert result["p90_ttfp_ratio"] == round(70.0 / 110.0, 3) and result["skipped"] == []


def test_near_the_deadline_the_ramp_stops_and_still_compares_at_the_last_load(monkeypatch, tmp_path):
    clock = FakeClock()
    p90 = {("fcfs-lru", 1): 50.0, ("fcfs-lru", 2): 60.0, ("liveserve", 2): 55.0}
    runs = fake_replays(monkeypatch, clock, p90, seconds=10.0)
    result = run_claim(PLAN, Deadline(45.0, clock), tmp_path)  # 25 s left after two runs: a step and its pair need 40
    assert runs == [("fcfs-lru", 1, 4), ("fcfs-lru", 2, 4), ("liveserve", 2, 4)]
    assert not result["reached_slowdown"]
    assert result["skipped"] == ["4 users (fcfs-lru, then liveserve) needs about 40 s and 25 s are left of the budget"]


def test_wheels_unpack_into_an_import_tree(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "demo-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("demo/__init__.py", "VALUE = 1\n")
        wheel.writestr("demo-1.0.dist-info/METADATA", "Name: demo\n")
        wheel.writestr("demo-1.0.data/purelib/demo_extra.py", "")
        wheel.writestr("demo-1.0.data/scripts/demo", "#!/bin/sh\n")
    assert unpack(wheels, site) == ["demo-1.0-py3-none-any.whl"]
    assert sorted(str(path.relative_to(site)) for path in site.rglob("*") if path.is_file()) == [
        "demo-1.0.dist-info/METADATA", "demo/__init__.py", "demo_extra.py"]


def test_a_checkout_that_is_not_installed_finds_its_configs(monkeypatch):
    def no_package(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(loader, "files", no_package)  # as on a machine where the check runs from the checkout
    assert loader.shipped_configs()["tiny-omni-cpu"] == REPO / "configs" / "tiny-omni-cpu.yaml"
    assert shipped_specs()["tiny-omni-cpu"] == REPO / "configs" / "sim" / "tiny-omni-cpu.yaml"  # the engine's prices


def test_the_claim_config_passes_every_check_a_server_makes_before_its_stages_start(monkeypatch):
    monkeypatch.setattr(deployment, "cuda_present", lambda: True)
    config = loader.load_config("tiny-omni-cpu", overrides=map(Override.parse, claim.on_gpu_overrides("bfloat16")))
    require_runnable(config)
    placements = plan(config, config.runtime.node)
    assert {placement.stage for placement in placements} == set(claim.STAGES)
    assert {(spec.device, spec.dtype) for spec in config.pipeline.stages} == {("cuda", "bfloat16")}


def test_wheels_must_be_there_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--wheels", str(tmp_path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and f"--wheels: no *.whl in {tmp_path}" in done.stderr
    assert not (tmp_path / "out").exists()


def test_only_names_the_sections_the_check_runs(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--only", "claim,kv", "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and f"--only: no section kv (sections: {', '.join(SHARES)})" in done.stderr
    chosen = check_sections(DRY_RUN, tmp_path, only=("kv_tier", "parity"))
    assert [section.name for section in chosen] == ["parity", "kv_tier"]  # in the check's order
