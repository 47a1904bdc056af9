"""`liveserve bench replay` end to end against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from lab.replay.options import ReplayOptions
from lab.replay.plan import PlannedSession, PlannedTurn
from lab.replay.presets import PRESETS
from lab.replay.run import run_replay
from lab.replay.session_runner import SessionSetup, run_session
from lab.workloads import FillerText, WorkloadRequest
from liveserve.cli import main
from stages.models.tokenizer import TextTokenizer
from tests.liveserve.realtime.realtime_harness import fixture_pcm16, small_config

OMNI_KINDS = ("encoder", "thinker", "talker", "vocoder")
MS_PER_TOKEN = 240.0  # tiny-omni: 3 codec frames of 80 ms per text token

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "Name three rivers in Europe, please."},
                                  {"from": "gpt", "value": "The Danube, the Rhine and the Seine."}]},
    {"id": "b", "conversations": [{"from": "human", "value": "hi"},
                                  {"from": "gpt", "value": "Hello! How can I help?"}]},
    {"id": "c", "conversations": [{"from": "human", "value": "What is the boiling point of water at sea level?"},
                                  {"from": "gpt", "value": "It boils at 100 degrees Celsius at sea level."}]},
]


def test_replay_of_a_sharegpt_file_against_a_running_server(server, tmp_path):
    path = tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json"
    path.write_text(json.dumps(SHAREGPT))
    options = ReplayOptions(dataset="sharegpt", dataset_path=path, num_requests=10, url=server.url,
                            max_concurrency=2, audio_ms_per_token=MS_PER_TOKEN)
    result = run_replay(options)
    assert (result["num_requests"], result["num_completed"], result["num_failed"]) == (2, 2, 0)  # "hi" < 4 tokens
    for record in result["requests"]:
        assert record["status"] == "incomplete"  # stopped at the forced reply length
        assert record["text_tokens"] == len(TextTokenizer.default().encode_literal(_reply_of(record["request_id"])))
        assert record["codec_frames"] == 3 * record["text_tokens"]
        assert record["audio_ms"] == pytest.approx(record["codec_frames"] * 80)
        assert 0 < record["text_ttft_ms"] and 0 < record["audio_ttfp_ms"] < 5000
        assert record["e2e_ms"] > record["audio_ttfp_ms"]
    assert result["audio_ttfp_ms"]["p50"] is not None and result["completed_rps"] > 0
    assert result["wasted_token_ratio"] == 0.0
    assert result["config"]["dataset"] == "sharegpt" and result["config"]["server"] == server.url


def _reply_of(request_id: str) -> str:
    return next(e["conversations"][1]["value"] for e in SHAREGPT if e["id"] == request_id)


def test_a_barge_in_speaks_over_the_reply_and_the_waste_is_what_was_not_heard(server):
    prompt = FillerText(TextTokenizer.default()).prompt(8)
    planned = PlannedTurn(WorkloadRequest("long", prompt, 8, 60), barge_in_after_ms=1500.0)
    setup = SessionSetup(server.url, fixture_pcm16("bargein_wait_espeak_24k.wav"))
    metrics, = asyncio.run(run_session(PlannedSession((planned,), 0.0), setup))
    assert metrics.status in ("cancelled", "incomplete")  # FCFS may finish generating before the user speaks
    assert metrics.codec_frames > 0 and metrics.unheard_codec_frames > 0
    heard_frames = metrics.codec_frames - metrics.unheard_codec_frames
    # the user spoke 1.5 s into playback; the VAD needs a few hundred ms of speech to notice
    assert 1500 / 80 <= heard_frames <= 3500 / 80
    assert metrics.unheard_text_tokens > 0


@pytest.mark.parametrize("hold", [False, True])
def test_a_session_holding_until_heard_ends_after_its_reply_has_played(server, hold):
    reply = WorkloadRequest("r", FillerText(TextTokenizer.default()).prompt(8), 8, 20)  # 20 x 240 ms = 4.8 s
    setup = SessionSetup(server.url, fixture_pcm16("bargein_wait_espeak_24k.wav"), hold_until_heard=hold)
    started = time.monotonic()
    metrics, = asyncio.run(run_session(PlannedSession((PlannedTurn(reply),), 0.0), setup))
    elapsed = time.monotonic() - started
    assert metrics.audio_ms == pytest.approx(4800)
    # The reply is generated faster than real time; only a held session waits for the player.
    assert (elapsed >= metrics.audio_ms / 1000) == hold


def test_cli_starts_a_fresh_server_per_run_and_writes_the_result(tmp_path, capsys):
    out = tmp_path / "result.json"
    status = main(["bench", "replay", "--config", str(small_config(tmp_path)), "--num-requests", "3",
                   "--random-input-len", "12", "--random-output-len", "6", "--max-concurrency", "2",
                   "--set", "stages.thinker.kv.num_blocks=1536", "--result-json", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "Audio TTFP (ms) mean / p50 / p90 / p99" in printed and "Continuity ok" in printed
    result = json.loads(out.read_text())
    assert result["num_completed"] == 3 and len(result["requests"]) == 3
    assert result["config"]["preset"] == "fcfs scheduling, no KV offload"
    applied = [*map(str, PRESETS["fcfs-nooffload"].overrides(OMNI_KINDS)), "stages.thinker.kv.num_blocks=1536"]
    assert result["config"]["server_overrides"] == applied and result["config"]["overrides"] == applied[-1:]
    assert result["kv"]["preemptions"] == 0.0 and result["kv"]["peak_device_blocks"] > 0
    by_stage = result["kv"]["peak_device_blocks_by_stage"]
    assert by_stage["thinker"] > 0 and by_stage["talker"] > 0
    assert sum(by_stage.values()) == result["kv"]["peak_device_blocks"]
    assert 0 < result["kv"]["mean_device_blocks"] <= result["kv"]["peak_device_blocks"]
    assert result["kv"]["reload_ms_on_path"] is None  # no host tier in this build: not exported
    report = (tmp_path / "result.html").read_text()  # beside the JSON
    assert report.count('src="data:image/png;base64,') == 2 and "fcfs scheduling, no KV offload" in report


@pytest.mark.parametrize(("argv", "message"), [
    (["--dataset", "sharegpt"], "dataset_path is required"),
    (["--url", "ws://10.0.0.1:8000/v1/realtime"], "loopback"),
    (["--url", "ws://127.0.0.1:8000/v1/realtime", "--set", "server.max_sessions=4"], "--set) configure a fresh server"),
    (["--num-requests", "1", "--set", "stages.thinker.kv.num_blockz=64"],
     "stages.thinker.kv.num_blockz: unknown field (did you mean 'num_blocks'?)"),
])
def test_cli_refuses_what_it_cannot_run_with_one_line(argv, message, capsys):
    assert main(["bench", "replay", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_url_that_serves_no_realtime_api_is_one_line(server, capsys):
    wrong_path = server.url.replace("/v1/realtime", "/v1/elsewhere")
    assert main(["bench", "replay", "--url", wrong_path, "--num-requests", "1", "--audio-ms-per-token", "240"]) == 2
    err = capsys.readouterr().err
    assert f"the warm-up request to {wrong_path} failed" in err and "Traceback" not in err


def test_a_malformed_dataset_names_where(tmp_path, capsys):
    path = tmp_path / "ShareGPT.json"
    path.write_text('[{"id": "a", "conversations": [{"from": "human", "value": "hi"')
    assert main(["bench", "replay", "--dataset", "sharegpt", "--dataset-path", str(path)]) == 2
    assert "ShareGPT.json line 1 column" in capsys.readouterr().err
