"""The playback telemetry the orchestrator publishes for the stages' schedulers."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.events import AudioDelta, TurnDone
from orchestrator.orchestrator import Orchestrator
from orchestrator.playback_board import NOT_STARTED, PlaybackBoard, reply_states
from orchestrator.turn import TurnRequest
from stages.interaction import PlaybackState


def test_stage_aware_buffers_add_up_downstream_work():
    # 80 ms frames, 3 frames per token: 10 spoken tokens, 24 codec frames, 16 vocoded
    thinker, talker, vocoder = reply_states(True, 100.0, 80.0, 3, spoken_tokens=10, codec_frames=24,
                                            vocoded_frames=16)
    assert vocoder == PlaybackState(True, 100.0, 0.0)
    assert talker.queued_ms == pytest.approx((24 - 16) * 80)
    assert thinker.queued_ms == pytest.approx((10 * 3 - 16) * 80)  # + 2 tokens the talker has not voiced
    # P: delivered audio left at `now` plus what later stages hold
    assert thinker.buffer_ms(99.5) == pytest.approx(500 + 14 * 80)
    assert vocoder.buffer_ms(101.0) == 0.0


def test_board_lookups_and_withdrawal():
    board = PlaybackBoard()
    assert board.playback("x") is None
    board.publish("x", NOT_STARTED)
    assert board.playback("x") is NOT_STARTED
    board.withdraw("x")
    board.withdraw("x")
    assert board.playback("x") is None


def test_a_turn_publishes_its_requests_until_it_ends(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            session = orch.open_session("s")
            assert orch.board.playback(session.thinker_id) == NOT_STARTED
            turn = orch.start_turn("s", TurnRequest(max_tokens=8, ignore_eos=True))
            first_audio = None
            while not isinstance(event := await asyncio.wait_for(turn.events.get(), 30), TurnDone):
                if isinstance(event, AudioDelta) and first_audio is None:
                    first_audio = event
                    orch.note_playback("s", True, orch.clock() + 2.0)
                    during = {kind: orch.board.playback(rid) for kind, rid in
                              (("thinker", session.thinker_id), ("talker", turn.ids["talker"]),
                               ("vocoder", turn.ids["vocoder"]))}
            after = (orch.board.playback(session.thinker_id), orch.board.playback(turn.ids["talker"]),
                     orch.board.playback(turn.ids["vocoder"]))
            orch.close_session("s")
            closed = orch.board.playback(session.thinker_id)
        finally:
            await orch.stop()
        return turn, during, after, closed

    turn, during, after, closed = asyncio.run(scenario())
    assert all(state.started for state in during.values())
    assert during["vocoder"].queued_ms == 0.0
    assert during["thinker"].queued_ms >= during["talker"].queued_ms >= 0.0
    assert during["thinker"].drained_at == during["vocoder"].drained_at
    assert turn.usage.vocoder_frames > 0
    assert after == (NOT_STARTED, None, None)  # the session waits for its next turn; the reply's requests are gone
    assert closed is None
