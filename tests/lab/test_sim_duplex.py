"""`bench duplex --simulate`: the real server's duplex streams in virtual time over priced steps."""

import json
from pathlib import Path

import pytest

from lab.duplex.options import DuplexOptions
from lab.duplex.result import RunLog, build_result
from lab.sim.duplex import run_simulated_duplex
from liveserve.cli import main

SPEC = str(Path(__file__).resolve().parents[2] / "configs" / "sim" / "qwen3-omni-1xh200.yaml")


def duplex(**fields) -> dict:
    fields = {"sessions": 4, "duration_s": 6.0, "simulate": SPEC, **fields}
    return run_simulated_duplex(DuplexOptions(**fields), log=open("/dev/null", "w"))


def test_the_command_writes_a_duplex_result_that_says_simulated(tmp_path, capsys):
    out = tmp_path / "result.json"
    status = main(["bench", "duplex", "--simulate", SPEC, "--sessions", "4", "--duration-s", "6",
                   "--result-json", str(out)])
    assert status == 0 and "Stalled sessions" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert set(result) == set(build_result(RunLog([], [], 1.0, 80), {})) | {"simulated"}
    assert result["simulated"]["spec"] == "qwen3-omni-1xh200" and result["simulated"]["calibration"]
    assert result["sessions"] == {"offered": 4, "admitted": 4, "rejected": 0, "failed": 0, "closed_by_server": 0}
    for session in result["per_session"]:  # 6 s of 80 ms frames, every one answered
        assert 70 <= session["frames"] == session["frames_due"] <= 75
    assert result["stalled_sessions"] == 0 and result["frame_latency_overall_ms"]["p50"] > 0
    assert result["config"]["simulate"] == SPEC and result["config"]["frame_ms"] == 80


def test_same_options_same_run():
    first, again = duplex(), duplex()
    assert _figures(first) == _figures(again) and first["occupancy"] == again["occupancy"]


def _figures(result: dict) -> list:
    """Each session's figures but its id (a process-wide counter)."""
    return [{key: value for key, value in s.items() if key != "session_id"} for s in result["per_session"]]


def test_an_unbounded_stream_fills_a_small_pool_and_a_window_keeps_it_flat():
    """The real window code runs: unbounded sessions saturate a pool their growth fills in seconds, the same
    sessions with a window stay at the window's footprint."""
    chunk = _overrides("stages.thinker.scheduler.max_num_batched_tokens=256")
    small = {"kv_blocks": 64, "duration_s": 12.0, "overrides": chunk}
    unbounded, windowed = duplex(**small), duplex(**small, window=64, sinks=4)
    assert unbounded["t_sat_measured_s"] is not None
    assert windowed["t_sat_measured_s"] is None and windowed["peak_occupancy"] < 0.9


def test_simulate_is_refused_with_a_running_servers_url():
    with pytest.raises(ValueError, match="--simulate runs its own simulated server"):
        DuplexOptions(sessions=1, simulate=SPEC, url="ws://127.0.0.1:8000/v1/realtime")


def _overrides(*texts):
    from liveserve.config.document import Override

    return tuple(Override.parse(t) for t in texts)
