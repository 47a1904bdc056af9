"""A stage process that dies: its work fails saying so, it is restarted, contexts are rebuilt, /health tells;
one that keeps dying is given up on. Each stage is killed mid-work: thinker, talker and vocoder mid-reply, the encoder
while the user speaks (that turn fails unanswered)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from orchestrator.orchestrator import Orchestrator
from orchestrator.placement import processes as process_placement
from orchestrator.placement.processes import ProcessPlacement
from orchestrator.session.events import TurnRequest
from tests.liveserve.realtime.realtime_harness import (
    Client,
    ServerProcess,
    connect,
    fixture_pcm16,
    silence,
    small_config,
)
from tests.orchestrator.placement.test_process_placement import wait_until
from tests.orchestrator.test_orchestrator import drain


def kill(orch: Orchestrator, kind: str) -> None:
    os.kill(orch.bus.stages[kind].process.pid, signal.SIGKILL)


def test_a_context_the_thinker_lost_is_rebuilt_on_the_next_turn(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline, placement=ProcessPlacement(1))
        await orch.start()
        try:
            session = orch.open_session("s", instructions="Be brief.")
            await session.add_user_item("u0", text="First question.")
            _, first = await drain(session.start_turn(TurnRequest(speak=False, max_tokens=3, ignore_eos=True)))
            kill(orch, "thinker")  # between turns: the resident context dies with the process
            await wait_until(lambda: session.context.is_lost, timeout_s=10)
            await wait_until(lambda: not orch.bus.down(), timeout_s=30)
            await session.add_user_item("u1", text="Second question.")
            _, second = await drain(session.start_turn(TurnRequest(speak=False, max_tokens=3, ignore_eos=True)))
            return first, second, session.context.num_rebuilds
        finally:
            await orch.stop()

    first, second, rebuilds = asyncio.run(scenario())
    assert second.status == "incomplete" and rebuilds == 1  # the context came back in a new thinker request
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.text_tokens  # it held the first turn


def test_a_stage_that_keeps_dying_is_given_up_on(pipeline, monkeypatch):
    monkeypatch.setattr(process_placement, "MAX_RESTARTS", 1)

    async def scenario():
        orch = Orchestrator(pipeline, placement=ProcessPlacement(1))
        await orch.start()
        try:
            kill(orch, "vocoder")
            await wait_until(lambda: "restarting" in orch.bus.down().get("vocoder", ""), timeout_s=10)
            await wait_until(lambda: not orch.bus.down(), timeout_s=30)
            kill(orch, "vocoder")
            await wait_until(lambda: "given up" in orch.bus.down().get("vocoder", ""), timeout_s=10)
            session = orch.open_session("s")
            await session.add_user_item("u0", text="Hello?")
            _, done = await drain(session.start_turn(TurnRequest(max_tokens=3)))
            return orch.bus.down(), done
        finally:
            await orch.stop()

    down, done = asyncio.run(scenario())
    assert down == {"vocoder": "given up after 1 restarts within 60 s"}
    assert done.status == "failed" and "stage vocoder is down: given up" in done.error


def health(server: ServerProcess) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def stage_pid(server: ServerProcess, stage: str) -> int:
    """The pid of a stage process of `server` (named ls-<stage>)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm, open(f"/proc/{entry}/stat") as stat:
                    name, ppid = comm.read().strip(), int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if name == f"ls-{stage}" and _descends_from(ppid, server.proc.pid):
                return int(entry)
    raise AssertionError(f"no process ls-{stage} under the server")


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
    return False


@pytest.mark.parametrize("stage", ["thinker", "talker", "vocoder"])
def test_after_a_stage_is_killed_mid_reply_health_says_degraded_and_a_new_session_completes_a_turn(tmp_path, stage):
    server = ServerProcess(small_config(tmp_path))

    async def reply(kill_after_first_audio: bool) -> dict:
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Tell me a long story.", max_output_tokens=200 if kill_after_first_audio else 4)
            if kill_after_first_audio:
                await client.next("response.output_audio.delta", timeout=60)
                os.kill(stage_pid(server, stage), signal.SIGKILL)
            return await client.next("response.done", timeout=60)

    try:
        assert health(server)[0] == 200
        failed = asyncio.run(reply(True))
        killed_at, seen, metrics_while_down = time.monotonic(), [], None
        while (status := health(server))[0] != 200:
            seen.append(status)
            metrics_while_down = metrics_while_down or server.metrics()
            assert time.monotonic() - killed_at < 30, seen[-1]
            time.sleep(0.1)
        done = asyncio.run(reply(False))
        recovered_s = time.monotonic() - killed_at
    finally:
        server.stop()
    assert failed["response"]["status"] == "failed"
    assert f"stage {stage} is down" in failed["response"]["status_details"]["error"]["message"]
    assert seen and seen[0][0] == 503 and seen[0][1]["status"] == "degraded" and stage in seen[0][1]["stages_down"]
    # a stage that is down has no figures (they would be stale), the others still do
    assert f'liveserve_stage_requests{{stage="{stage}"}}' not in metrics_while_down
    assert 'liveserve_stage_requests{stage="encoder"}' in metrics_while_down
    assert done["response"]["status"] in ("completed", "incomplete") and recovered_s < 30


def test_with_the_encoder_killed_mid_speech_the_turn_fails_unanswered_and_the_next_one_is_heard(tmp_path):
    server = ServerProcess(small_config(tmp_path))
    audio = np.concatenate([silence(300), fixture_pcm16("q_capital_espeak_24k.wav"), silence(1200)])

    async def spoken(kill_after_speech_starts: bool) -> tuple[dict, int]:
        """response.done, and how many audio deltas came before it."""
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.send("session.update", session={"type": "realtime", "max_output_tokens": 4})
            await client.next("session.updated")
            rest = audio
            if kill_after_speech_starts:
                await client.append(audio[:len(audio) // 3], realtime=False)
                await client.next("input_audio_buffer.speech_started", timeout=30)
                os.kill(stage_pid(server, "encoder"), signal.SIGKILL)
                rest = audio[len(audio) // 3:]
            await client.append(rest, realtime=False)
            done = await client.next("response.done", timeout=60)
            return done, len(client.received("response.output_audio.delta"))

    try:
        failed, failed_audio = asyncio.run(spoken(True))
        killed_at, seen = time.monotonic(), []
        while (status := health(server))[0] != 200:
            seen.append(status)
            assert time.monotonic() - killed_at < 30, seen[-1]
            time.sleep(0.1)
        done, audio = asyncio.run(spoken(False))
    finally:
        server.stop()
    assert failed["response"]["status"] == "failed" and failed_audio == 0  # not answered without the speech
    assert "stage encoder is down" in failed["response"]["status_details"]["error"]["message"]
    assert seen and seen[0][1]["status"] == "degraded" and "encoder" in seen[0][1]["stages_down"]
    assert done["response"]["status"] in ("completed", "incomplete") and audio > 0
