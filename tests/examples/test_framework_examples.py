"""Each client framework's example (examples/) run unmodified against the embedded default (the voice agent)
on 127.0.0.1: a spoken turn, a text turn and a barge-in, with no error event and no event the framework
fails to parse. The openai-agents example keeps the SDK's default session settings (semantic_vad, voice
'ash', input transcription, tracing 'auto'). Each test checks on the server that the barge-in cut a reply:
its unheard-work counters grew. The LiveKit example asks for replies of up to 64 tokens (the fixture's 16 would
stop them, and to LiveKit's plugin a reply stopped at the limit is a failed generation), so each of its answers
ends by itself. The Agents SDK's function-tool example calls its tool (tool_choice required) and speaks the
result, on the embedded default and on tiny-omni; pipecat's runs a registered function the same way.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.server_process import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENDED = ("completed", "incomplete")  # a reply that ran to its end or to its token limit


def run_example(server: ServerProcess, command: list[str]) -> dict:
    """The example's JSON summary; asserts the server cut a reply (unheard thinker tokens grew)."""
    before = server.metric("liveserve_unheard_units_total", stage="thinker")
    done = subprocess.run([*command, server.url], capture_output=True, text=True, timeout=300, cwd=EXAMPLES)
    assert done.returncode == 0, done.stderr[-3000:]
    assert server.metric("liveserve_unheard_units_total", stage="thinker") > before  # the barge-in cut a reply
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_openai_agents_sdk_with_its_default_session_settings(example_server):
    result = run_example(example_server, [sys.executable, "agents_sdk_turns.py"])
    assert result["parse_failures"] == []
    turns = result["turns"]
    assert turns["spoken"] in ENDED and turns["text"] in ENDED and turns["barge_in"]["answer"] in ENDED
    assert turns["barge_in"]["reply_cut"] and turns["barge_in"]["sdk_interrupted_playback"] >= 1
    assert result["errors"] == []
    assert result["server_events"]["conversation.item.input_audio_transcription.completed"] >= 2  # spoken turns


def test_pipecat_with_semantic_turn_detection(example_server):
    result = run_example(example_server, [sys.executable, "pipecat_turns.py"])
    assert result["errors"] == []
    audio = result["turns_audio_bytes"]  # each response pipecat saw end, with its audio
    assert audio["text"] > 0 and audio["spoken"] > 0 and audio["barge_in"]["answer"] > 0


def test_livekit_agents_openai_realtime_plugin_with_its_defaults(example_server):
    result = run_example(example_server, [sys.executable, "livekit_turns.py"])
    assert result["parse_failures"] == [] and result["plugin_errors"] == []
    turns = result["turns"]
    answers = [turns["spoken"], turns["text"], turns["barge_in"]["answer"]]
    assert [answer["status"] for answer in answers] == ["completed"] * 3  # not incomplete: an error to LiveKit
    assert all(answer["audio_ms"] > 0 for answer in answers)  # the plugin handed on each reply's audio
    assert turns["barge_in"]["reply_cut"]
    assert result["errors"] == []
    assert result["server_events"]["conversation.item.input_audio_transcription.completed"] >= 2  # spoken turns


def sdk_server_event_types() -> set[str]:
    """Every event `type` the installed openai JS SDK's realtime type declarations name."""
    declarations = EXAMPLES / "js" / "node_modules" / "openai" / "resources" / "realtime" / "realtime.d.ts"
    return set(re.findall(r"type: '([a-z_.]+)'", declarations.read_text()))


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_openai_js_sdk(example_server):
    assert (EXAMPLES / "js" / "node_modules" / "openai").is_dir(), "run `make test` (it runs npm ci in examples/js)"
    result = run_example(example_server, ["node", "js/turns.mjs"])
    assert result["errors"] == []
    assert set(result["server_events"]) <= sdk_server_event_types()
    turns = result["turns"]
    assert turns["spoken"] in ENDED and turns["text"] in ENDED and turns["barge_in"]["answer"] in ENDED
    assert turns["barge_in"]["reply_cut_at_ms"] >= 0  # the example waited for the playing reply's truncation


def tool_example(server: ServerProcess, example: str = "agents_sdk_tools.py") -> dict:
    done = subprocess.run([sys.executable, example, server.url], capture_output=True, text=True,
                          timeout=300, cwd=EXAMPLES)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_called_then_answered(result: dict) -> None:
    """The agent's required tool was called once, with arguments its schema allows, then answered by voice."""
    assert result["parse_failures"] == []
    [call] = result["calls"]
    assert 1 <= call["order_id"] <= 99999
    assert [r["output"] for r in result["responses"]] == [["function_call"], ["message"]]
    assert result["responses"][0]["status"] == "completed" and result["responses"][1]["status"] in ENDED
    assert result["server_events"]["response.output_audio.delta"] > 0
    assert result["server_events"]["response.function_call_arguments.done"] == 1


def test_openai_agents_sdk_calls_a_function_tool_and_speaks_its_result(example_server):
    result = tool_example(example_server)
    assert_called_then_answered(result)
    assert result["errors"] == []
    assert result["calls"] == [{"order_id": 42}] and "Tuesday" in result["answer"]  # SmolLM2 reads the result


def test_openai_agents_sdk_function_tool_on_tiny_omni(server):
    result = tool_example(server)  # random weights: a call valid for the schema, then any words
    assert_called_then_answered(result)
    assert [e["param"] for e in result["errors"]] == ["session.audio.input.transcription"]  # tiny-omni has no ASR


def test_pipecat_runs_a_registered_function_and_speaks_its_result(example_server):
    result = tool_example(example_server, "pipecat_tools.py")
    assert result["errors"] == [] and result["calls"] == [{"order_id": 42}]
    assert result["answer_audio_bytes"] > 0 and "Tuesday" in result["answer"]
