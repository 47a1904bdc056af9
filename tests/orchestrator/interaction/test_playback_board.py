"""The playback telemetry the orchestrator publishes for the stages' schedulers."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.config import InteractionConfig
from orchestrator.datapath.chunk_stream import ChunkStream
from orchestrator.datapath.stage_graph import ChunkSizes
from orchestrator.interaction.next_use import NextUseEstimator
from orchestrator.interaction.playback_board import NOT_STARTED, NextUseHint, PlaybackBoard, reply_states
from orchestrator.orchestrator import Orchestrator
from orchestrator.session.events import AudioDelta, TurnDone, TurnRequest
from stages.interaction import PlaybackState


def test_stage_aware_buffers_add_up_downstream_work():
    # 80 ms frames: 8 frames at the vocoder, and 16 more that fill whole vocoder chunks
    thinker, talker, vocoder = reply_states(True, 100.0, 80.0, queued_frames=8, chunked_frames=16, delivered_ms=640.0)
    assert vocoder == PlaybackState(True, 100.0, 0.0, delivered_ms=640.0)  # the stage adds frames decoded since
    assert vocoder.buffer_ms(99.5, audio_ms=800.0) == pytest.approx(500 + 160)
    assert thinker.delivered_ms is talker.delivered_ms is None
    assert talker.queued_ms == pytest.approx(8 * 80)
    assert thinker.queued_ms == pytest.approx((8 + 16) * 80)
    # P: delivered audio left at `now` plus what later stages hold
    assert thinker.buffer_ms(99.5) == pytest.approx(500 + 24 * 80)
    assert vocoder.buffer_ms(101.0) == 0.0


def test_only_whole_vocoder_chunks_count_as_audio_to_come():
    stream = ChunkStream(ChunkSizes(first_chunk=4, chunk=16))
    assert stream.whole_chunks(3) == 0 and stream.whole_chunks(4) == 4 and stream.whole_chunks(35) == 20
    assert stream.push([0] * 6) == [[0] * 4] and stream.num_buffered == 2
    # 2 buffered: 14 more fill the next 16-frame chunk; 13 leave it waiting for one more
    assert stream.whole_chunks(13) == 0 and stream.whole_chunks(14) == 16 and stream.whole_chunks(46) == 48


def test_a_ramp_doubles_chunks_up_to_the_steady_size():
    sizes = ChunkSizes(first_chunk=3, chunk=16, ramp=True)
    assert [sizes.size(i) for i in range(5)] == [3, 6, 12, 16, 16]
    stream = ChunkStream(sizes)
    # 3 + 6 + 12 leave whole; 16 more fill one steady chunk, 15 do not
    assert stream.whole_chunks(20) == 9 and stream.whole_chunks(21) == 21 and stream.whole_chunks(52) == 37
    assert stream.push([0] * 10) == [[0] * 3, [0] * 6] and stream.num_buffered == 1
    assert stream.push([0] * 11) == [[0] * 12] and stream.whole_chunks(15) == 0 and stream.whole_chunks(16) == 16
    assert [s.size(1) for s in (ChunkSizes(4, 1, ramp=True), ChunkSizes(4, 16))] == [1, 16]


def test_board_lookups_and_withdrawal():
    board = PlaybackBoard(lambda: 10.0)
    assert board.playback("x") is None and board.next_use("x") is None
    board.publish("x", NOT_STARTED)
    board.publish_next_use("x", NextUseHint(drained_at=12.0, reply_gap_s=1.5))
    assert board.playback("x") is NOT_STARTED
    assert board.next_use("x") == pytest.approx(13.5)  # 2 s of playback left, then the usual gap
    board.withdraw("x")
    board.withdraw("x")
    assert board.playback("x") is None and board.next_use("x") is None


def test_next_use_counts_remaining_playback_only_while_it_lasts():
    hint = NextUseHint(drained_at=5.0, reply_gap_s=2.0)
    assert hint.at(4.0) == 7.0
    assert hint.at(9.0) == 11.0  # playback over: the gap runs from now
    assert NextUseHint(5.0, 2.0, needed_now=True).at(4.0) == 4.0


def test_estimator_learns_the_users_reply_gap_and_speech_lead():
    estimator = NextUseEstimator(InteractionConfig(reply_gap_s=2.0, speech_lead_s=1.0, ema_weight=0.5))
    assert estimator.hint(0.0) == NextUseHint(0.0, 2.0)
    estimator.on_playback(drained_at=10.0)
    estimator.on_speech_started(now=11.0)  # replied 1 s after playback ended: gap (2 + 1) / 2
    assert estimator.reply_gap_s == pytest.approx(1.5)
    assert estimator.hint(11.0).at(11.0) == 11.0  # speaking: needed now
    estimator.on_turn_started(now=14.0)  # 3 s from speech start to the turn: lead (1 + 3) / 2
    assert estimator.lead_s == pytest.approx(2.0)
    assert estimator.hint(14.0).at(14.0) == 14.0  # generating: needed now
    estimator.on_generation_end(now=14.0)
    assert estimator.hint(14.0).at(14.0) == pytest.approx(15.5)
    estimator.on_playback(drained_at=20.0)
    estimator.on_speech_started(now=18.0)  # barge-in before the end: a gap of 0
    assert estimator.reply_gap_s == pytest.approx(0.75)


def test_estimator_learns_the_reply_gap_of_a_session_that_writes():
    estimator = NextUseEstimator(InteractionConfig(reply_gap_s=2.0, speech_lead_s=1.0, ema_weight=0.5))
    estimator.on_user_input(now=1.0)  # the first item: no reply before it, nothing to learn
    estimator.on_turn_started(now=1.0)
    estimator.on_generation_end(now=3.0)  # a text reply is over when generated
    assert estimator.hint(3.0).at(3.0) == pytest.approx(5.0)
    estimator.on_user_input(now=9.0)  # the next item 6 s after the reply: gap (2 + 6) / 2
    assert estimator.reply_gap_s == pytest.approx(4.0)
    estimator.on_turn_started(now=9.0)
    estimator.on_playback(drained_at=15.0)  # a spoken reply: its playback end counts, not its generation end
    estimator.on_generation_end(now=12.0)
    assert estimator.hint(12.0).at(12.0) == pytest.approx(19.0)


def test_a_turn_publishes_its_requests_until_it_ends(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            session = orch.open_session("s")
            assert orch.board.playback(session.context.thinker_id) == NOT_STARTED
            turn = orch.sessions["s"].start_turn(TurnRequest(max_tokens=8, ignore_eos=True))
            first_audio = None
            while not isinstance(event := await asyncio.wait_for(turn.events.get(), 30), TurnDone):
                if isinstance(event, AudioDelta) and first_audio is None:
                    first_audio = event
                    drained_at = orch.clock() + 30.0
                    orch.sessions["s"].interaction.on_playback(True, drained_at, event.duration_ms)
                    during = {kind: orch.board.playback(rid) for kind, rid in
                              (("thinker", session.context.thinker_id), ("talker", turn.reply.ids["talker"]),
                               ("vocoder", turn.reply.ids["vocoder"]))}
            after = (orch.board.playback(session.context.thinker_id), orch.board.playback(turn.reply.ids["talker"]),
                     orch.board.playback(turn.reply.ids["vocoder"]))
            next_use = orch.board.next_use(session.context.thinker_id) - drained_at  # generation over: playback end + gap
            orch.close_session("s")
            closed = orch.board.playback(session.context.thinker_id)
        finally:
            await orch.stop()
        return turn, during, after, closed, next_use

    turn, during, after, closed, next_use = asyncio.run(scenario())
    assert next_use == pytest.approx(pipeline.interaction.reply_gap_s)  # playback end + the prior reply gap
    assert all(state.started for state in during.values())
    assert during["vocoder"].queued_ms == 0.0
    assert during["thinker"].queued_ms >= during["talker"].queued_ms >= 0.0
    assert during["thinker"].drained_at == during["vocoder"].drained_at
    assert turn.usage.vocoder_frames > 0
    assert after == (NOT_STARTED, None, None)  # the session waits for its next turn; the reply's requests are gone
    assert closed is None


def test_the_stages_of_one_process_share_one_device_board(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            return [stage.scheduler.policy.device for stage in orch.bus.stages.values()]
        finally:
            await orch.stop()

    devices = asyncio.run(scenario())
    assert len(devices) == 4 and devices[0] is not None and all(device is devices[0] for device in devices)


def test_a_copy_of_the_board_replays_its_journal_in_order():
    board, copy = PlaybackBoard(lambda: 10.0), PlaybackBoard(lambda: 10.0)
    board.publish("before", NOT_STARTED)  # written before journalling: not the copy's business
    board.record_changes()
    board.publish("a", NOT_STARTED)
    board.publish("a", PlaybackState(True, 12.0, 80.0))  # the later write wins
    board.publish_next_use("b", NextUseHint(drained_at=11.0, reply_gap_s=2.0))
    board.publish("c", NOT_STARTED)
    board.withdraw("c")
    copy.apply_changes(board.drain_changes())
    assert copy.playback("a") == PlaybackState(True, 12.0, 80.0) and copy.next_use("b") == 13.0
    assert copy.playback("c") is None and copy.playback("before") is None
    assert board.drain_changes() == []  # drained once
