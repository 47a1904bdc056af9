"""Sweeps of either command (`command: replay | duplex`) and their `set:` overrides."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest

from lab.duplex.options import DuplexOptions
from lab.replay.options import ReplayOptions
from lab.sweep import load_sweep_spec, run_sweep
from lab.sweep.command import point_runner, run_sweep_command
from liveserve.config.document import Override
from liveserve.config.reader import ConfigError
from tests.liveserve.realtime.realtime_harness import small_config

DUPLEX_SPEC = """
command: duplex
duplex:
  duration_s: 20
  frame_ms: 160
  set: [runtime.placement=threads]
grid:
  sessions: [2, 4]
  set: [[], stages.thinker.kv.num_blocks=128, [stages.thinker.kv.num_blocks=64, server.max_sessions=8]]
"""


def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_duplex_sweep_is_typed_by_the_duplex_options(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, DUPLEX_SPEC))
    points = spec.points()
    assert spec.command == "duplex" and all(isinstance(p, DuplexOptions) for p in points) and len(points) == 6
    assert [(p.sessions, p.duration_s, p.frame_ms) for p in points[:3]] == [(2, 20.0, 160)] * 3
    threads = Override(("runtime", "placement"), "threads")
    assert points[0].overrides == (threads,)  # the shared `set` first, then the point's
    assert points[2].overrides == (threads, Override(("stages", "thinker", "kv", "num_blocks"), 64),
                                   Override(("server", "max_sessions"), 8))
    assert spec.point_of(points[1]) == {"sessions": 2, "set": ["stages.thinker.kv.num_blocks=128"]}
    assert spec.point_of(points[3]) == {"sessions": 4, "set": []}


def test_a_spec_without_a_command_is_a_replay_sweep_and_may_set_overrides(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, "replay: {set: [server.max_sessions=200]}\n"
                                                "grid: {set: [stages.thinker.kv.num_blocks=128, "
                                                "stages.thinker.kv.num_blocks=256]}\n"))
    points = spec.points()
    assert spec.command == "replay" and all(isinstance(p, ReplayOptions) for p in points)
    assert [[str(o) for o in p.overrides] for p in points] == [
        ["server.max_sessions=200", "stages.thinker.kv.num_blocks=128"],
        ["server.max_sessions=200", "stages.thinker.kv.num_blocks=256"]]


@pytest.mark.parametrize("text, message", [
    ("command: rtc\ngrid: {sessions: [1]}\n", "command: expected one of replay, duplex, got 'rtc'"),
    ("grid: {sessions: [1]}\n", "grid.sessions: not a replay option"),
    ("command: duplex\ngrid: {num_requests: [1]}\n", "grid.num_requests: not a duplex option"),
    ("command: duplex\nreplay: {dataset: random}\ngrid: {sessions: [1]}\n", "replay: unknown field"),
    ("command: duplex\ngrid: {sessions: [1], admission_set: [[target, 0.4]]}\n",
     "grid.admission_set: not allowed in a sweep: give set: [admission.NAME=VALUE, ...] instead"),
    ("command: duplex\ngrid: {sessions: [1], url: ['ws://127.0.0.1:1']}\n", "grid.url: not allowed in a sweep"),
    ("command: duplex\ngrid: {sessions: [1, 0]}\n", "point 2 (sessions=0): --sessions must be an integer >= 1"),
    ("grid: {set: [a.b=1, stages.thinker]}\n", "grid.set[1]: --set 'stages.thinker': expected KEY.PATH=VALUE"),
    ("grid: {set: [a.b=1, [a.b=1]]}\n", "grid.set[1]: repeats ['a.b=1']"),
    ("replay: {set: a.b=1}\ngrid: {policy: [liveserve]}\n", "replay.set: expected a list of KEY.PATH=VALUE strings"),
])
def test_command_and_set_mistakes_name_the_field(tmp_path, text, message):
    with pytest.raises(ConfigError, match=r"^" + str(tmp_path).replace("\\", "\\\\")) as caught:
        load_sweep_spec(write_spec(tmp_path, text))
    assert message in str(caught.value)


def fake_duplex_result(options: DuplexOptions) -> dict:
    return {"sessions": {"offered": options.sessions, "admitted": options.sessions, "rejected": 0},
            "frame_latency_overall_ms": {"p50": 12.0, "p99": 40.0 * options.sessions}, "frames_per_s": 6.25,
            "stalled_sessions": 0, "peak_occupancy": 0.5, "t_sat_measured_s": None, "t_sat_predicted_s": 300.0}


def test_a_duplex_sweep_runs_through_the_same_runner_and_tabulates_its_figures(tmp_path):
    spec = load_sweep_spec(write_spec(tmp_path, DUPLEX_SPEC))
    records = run_sweep(spec, tmp_path / "out", fake_duplex_result, lambda o: None, progress=io.StringIO())
    assert [record["point"] for record in records][:2] == [
        {"sessions": 2, "set": []}, {"sessions": 2, "set": ["stages.thinker.kv.num_blocks=128"]}]
    markdown = (tmp_path / "out" / "results.md").read_text()
    assert "Every point: duration_s=20.0 frame_ms=160 set=runtime.placement=threads." in markdown
    assert ("| sessions | set | admitted | rejected | frame latency P50 (ms) | frame latency P99 (ms) | frames/s "
            "| stalled sessions | peak KV occupancy | t_sat measured (s) | t_sat predicted (s) |") in markdown
    assert ("| 4 | stages.thinker.kv.num_blocks=64, server.max_sessions=8 | 4 | 0 | 12.0 | 160.0 | 6.2 | 0 | 0.500 "
            "| - | 300.0 |") in markdown
    assert "A duplex sweep draws no plots" in markdown
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.html", "results.json", "results.md"]


@pytest.mark.parametrize("command, shared", [("replay", "num_requests: 1"), ("duplex", "sessions: 1")])
def test_a_point_whose_config_the_server_would_refuse_stops_the_sweep_before_it_runs(tmp_path, capsys, command,
                                                                                      shared):
    spec = write_spec(tmp_path, f"command: {command}\n{command}: {{{shared}}}\n"
                                "grid: {set: [stages.thinker.kv.num_blocks=64, stages.thinker.kv.num_blockz=64]}\n")
    assert run_sweep_command(spec, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: stages.thinker.kv.num_blockz: unknown field") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_one_point_duplex_sweep_against_a_fresh_server(tmp_path):
    spec = write_spec(tmp_path, f"command: duplex\nduplex: {{config: {small_config(tmp_path)}, duration_s: 2, "
                                "frame_ms: 160}\ngrid: {sessions: [1]}\n")
    status = run_sweep_command(spec, tmp_path / "out")
    record, = json.loads((tmp_path / "out" / "results.json").read_text())
    assert status == 0 and record["error"] is None and record["point"] == {"sessions": 1}, record["error"]
    result = record["result"]
    assert result["sessions"]["admitted"] == 1 and result["frames_total"] > 0
    assert result["config"]["server_overrides"][0] == "duplex.frame_ms=160"
    assert "| 1 | 1 | 0 |" in (tmp_path / "out" / "results.md").read_text()


CHECKOUT = Path(__file__).resolve().parents[2]
SHIPPED_SPECS = sorted((CHECKOUT / "benchmarks" / "sweeps").glob("*.yaml"))
PREPARED_SHAREGPT = Path("benchmarks/data/ShareGPT_V3_prefix.json")


@pytest.mark.parametrize("path", SHIPPED_SPECS, ids=lambda path: path.stem)
def test_every_shipped_sweep_passes_its_pre_run_check(path, monkeypatch, tmp_path):
    # a broken spec would otherwise surface only when its sweep starts; paths are the checkout's, except the
    # ShareGPT file, which a clone lacks until benchmarks/prepare_sharegpt.py writes it: a stand-in takes its place
    monkeypatch.chdir(CHECKOUT)
    spec = load_sweep_spec(path)
    check = point_runner(spec.command)[1]
    stand_in = tmp_path / PREPARED_SHAREGPT.name
    stand_in.write_text("[]")
    for options in spec.points():
        if options.dataset_path is not None:
            assert options.dataset_path == PREPARED_SHAREGPT
            options = dataclasses.replace(options, dataset_path=stand_in)
        check(options)
    assert len(spec.points()) >= 2
