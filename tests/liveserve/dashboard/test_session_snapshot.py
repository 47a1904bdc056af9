"""The orchestrator's snapshot of a session as its interaction goes: states, urgency, KV place, barge-in."""

from __future__ import annotations

import asyncio
import dataclasses

from orchestrator.snapshot import classify, take_snapshot
from stages.config import SchedulerConfig
from stages.engine import StageStatus
from stages.interaction import PlaybackState
from stages.policies.urgency import UrgencyParams
from tests.liveserve.realtime.interaction_harness import InteractionHarness
from tests.orchestrator.conftest import tiny_pipeline

WIDTH, FRAME = 64, 1920  # the tiny thinker's hidden size; samples of one 80 ms codec frame at 24 kHz


def urgent_pipeline():
    config = tiny_pipeline()
    thinker = dataclasses.replace(config.thinker, scheduler=SchedulerConfig(policy="urgency"))
    return dataclasses.replace(config, thinker=thinker)


def thinker_status(resident: dict, host_blocks_used: int | None = None) -> StageStatus:
    """The thinker stage's report: `resident` tokens per request; a host tier when `host_blocks_used` is given."""
    tier = {} if host_blocks_used is None else {"host_blocks_used": host_blocks_used}
    return StageStatus("thinker", len(resident), 0, 0, 10, 246, 10, 0.0, 0, 0, 0, 0.0, True,
                       kv_counters=tier, resident_tokens=resident)


def test_the_urgency_class_follows_the_policys_rule():
    params = UrgencyParams()  # p_safe 400, p_max 2000 ms
    assert classify(None, 0.0, params) == "no telemetry"
    assert classify(PlaybackState(False, 0.0), 0.0, params) == "u1"
    assert classify(PlaybackState(True, 0.3), 0.0, params) == "u0"
    assert classify(PlaybackState(True, 1.0, 500.0), 0.0, params) == "u2"
    assert classify(PlaybackState(True, 2.0), 0.0, params) == "held"


def test_a_session_goes_listening_speaking_generating_playing_and_is_marked_when_barged_in():
    async def scenario():
        async with InteractionHarness(urgent_pipeline()) as h:
            config, controller = h.orch.config, h.controller

            def session(status: StageStatus | None = None, streaming: tuple[str, ...] = ()):
                statuses = [status or thinker_status({})]
                snapshot = take_snapshot(config, [controller], statuses, h.orch.board, streaming, h.clock())
                return snapshot.sessions[0]

            def detection(value):
                return h.client("session.update", session={"audio": {"input": {"turn_detection": value}}})

            await detection(None)  # the client commits turns itself
            seen = [session(), session(streaming=(controller.session_id,))]
            await detection({"type": "server_vad"})
            seen.append(session())
            await h.speak(600)  # speech started, not yet ended
            seen.append(session())
            await h.speak(0, then_silence_ms=700)  # the turn ends: a reply starts, no audio yet
            encoder_id, = h.stages.added("encoder")
            h.stages.encode(encoder_id, 8, WIDTH)
            await h.settle()
            turn = controller.turn
            seen.append(session())
            h.stages.think(h.thinker_id, turn.turn_id, [10, 11, 12, 13], WIDTH, finish="length")
            h.stages.speak(turn.reply.ids["talker"], 8, finished=True)
            await h.settle()
            h.stages.voice(turn.reply.ids["vocoder"], 8 * FRAME, finished=True)  # 640 ms of audio delivered
            await h.settle()
            h.clock.t = 0.3
            seen.append(session())
            context = controller.session.context.num_tokens
            places = [session(thinker_status({h.thinker_id: tokens}, host)).kv_place
                      for tokens, host in ((context, 4), (context - 1, None), (3, None), (3, 4))]
            vllm = dataclasses.replace(thinker_status({}), num_requests=1)  # holds requests, reports no tokens
            places.append(session(vllm).kv_place)
            h.clock.t = 0.35
            await h.speak(300)  # speech over the playing reply: a barge-in
            seen.append(session())
            places.append(session(thinker_status({h.thinker_id: 3}, 4)).kv_place)  # needed now: coming back
            return seen, places

    seen, places = asyncio.run(scenario())
    assert [s.state for s in seen] == ["idle", "duplex", "listening", "user speaking", "generating", "playing",
                                       "user speaking"]
    idle, _, listening, speaking, generating, playing, barging = seen
    assert generating.urgency == "u1"  # no first audio yet
    assert playing.urgency == "" and playing.playback_buffer_ms == 340.0  # generated: 640 ms delivered, 300 played
    assert [s.last_barge_in_at for s in seen] == [None] * 6 + [0.35]
    assert speaking.next_use_s == 0 and playing.next_use_s > 0.3  # needed now while the user speaks
    assert playing.context_tokens > listening.context_tokens and idle.device_tokens == 0
    # All on the device (or all but the reply's unfed last token); else off it: on the host tier when it has one,
    # in transfer once needed
    assert places == ["device", "device", "pending", "host", "unknown", "in transfer"]
