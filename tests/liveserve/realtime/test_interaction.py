"""Interaction decisions in milliseconds: a realtime session over scripted stages and a fake clock.

Each test pushes protocol events in, makes the stages answer, moves the clock (the user's playback
runs on it), and asserts the server events that come out and the commands the stages got.
"""

from __future__ import annotations

import asyncio
import base64

import pytest

from orchestrator.interaction.recent_replies import MEASURED_REPLIES
from stages.commands import AbortRequest, AppendInput, StopGeneration
from stages.plan import StageOutput
from stages.requests.asr import Transcript
from tests.liveserve.realtime.interaction_harness import InteractionHarness, harnessed_voice
from tests.orchestrator.conftest import tiny_pipeline

WIDTH = 64  # the tiny thinker's hidden size (and the encoder's output)
FRAME = 1920  # samples of one 80 ms codec frame at 24 kHz


def run(scenario):
    async def harnessed():
        async with InteractionHarness(tiny_pipeline()) as harness:
            return await scenario(harness)
    return asyncio.run(harnessed())


async def spoken_reply_playing(h: InteractionHarness, finished: bool = False) -> tuple[str, dict]:
    """The user speaks a turn; the reply's 4 tokens become 8 codec frames, delivered as 640 ms of audio at
    t = 0, then the clock moves to t = 0.3 s (300 ms played). (response item id, request ids by kind)"""
    await h.speak(600, then_silence_ms=700)  # VAD: started, stopped; the speech is committed, a reply starts
    item = h.of_type("input_audio_buffer.committed")[0]["item_id"]
    encoder_id, = h.stages.added("encoder")
    assert encoder_id.generation == item  # the user item's audio is being encoded
    h.stages.encode(encoder_id, 8, WIDTH)  # the user item enters the context
    await h.settle()
    turn = h.controller.turn
    h.stages.think(h.thinker_id, turn.turn_id, [10, 11, 12, 13], WIDTH, finish="length" if finished else None)
    h.stages.speak(turn.reply.ids["talker"], 8, finished=finished)
    await h.settle()
    h.stages.voice(turn.reply.ids["vocoder"], 8 * FRAME, finished=finished)
    await h.settle()
    h.clock.t = 0.3
    return h.of_type("response.output_item.added")[0]["item"]["id"], turn.reply.ids


def test_speech_ends_a_turn_commits_it_and_starts_a_reply():
    async def scenario(h):
        await spoken_reply_playing(h)
        return h.types()

    types = run(scenario)
    for earlier, later in [("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"),
                           ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed"),
                           ("input_audio_buffer.committed", "conversation.item.added"),
                           ("conversation.item.added", "response.created"),
                           ("response.created", "response.output_audio.delta")]:
        assert types.index(earlier) < types.index(later), (earlier, later)
    assert "conversation.item.done" in types  # the user item reached the context


def test_speech_over_a_generating_reply_cancels_it_and_keeps_what_was_heard():
    async def scenario(h):
        item_id, ids = await spoken_reply_playing(h)
        await h.speak(300)  # barge-in, 300 ms into the reply's playback
        return h, item_id, ids

    h, item_id, ids = run(scenario)
    done = h.of_type("response.done")[-1]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "turn_detected"
    truncated = h.of_type("conversation.item.truncated")[-1]
    assert truncated["item_id"] == item_id and truncated["audio_end_ms"] == 300
    # 300 ms heard: codec frames 0-3 had started (80 ms each), so 2 of the 4 spoken tokens (3 frames each)
    assert truncated["liveserve"] == {"heard_ms": 300.0, "unheard_text_tokens": 2, "unheard_audio_tokens": 4,
                                      "unheard_vocoder_frames": 4}
    aborted = {c.request_id for kind in ("talker", "vocoder") for c in h.stages.sent(kind, AbortRequest)}
    assert aborted == {ids["talker"], ids["vocoder"]}  # cancelled in every stage
    assert h.stages.sent("thinker", StopGeneration)  # the context cut to what was heard
    assert h.types().index("input_audio_buffer.speech_started") < h.types().index("response.done")


def test_speech_resuming_in_the_audio_that_ended_the_turn_cuts_the_reply_it_started():
    async def scenario(h):
        await h.speak(600, then_silence_ms=700, then_speech_ms=300)  # one append: the turn ends, speech resumes
        return h

    h = run(scenario)
    reply = h.of_type("response.output_item.added")[0]["item"]["id"]
    done = h.of_type("response.done")[0]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "turn_detected"
    assert h.of_type("conversation.item.truncated")[0]["item_id"] == reply
    assert h.of_type("error") == []
    assert h.controller.turn is None  # the speech's own turn may be answered


def test_speech_over_a_reply_that_is_still_playing_cuts_it_where_playback_was():
    async def scenario(h):
        item_id, _ = await spoken_reply_playing(h, finished=True)
        done_before = len(h.of_type("response.done"))
        await h.speak(300)
        return h, item_id, done_before

    h, item_id, done_before = run(scenario)
    assert h.of_type("response.done")[0]["response"]["status"] == "incomplete"  # ended at its length
    assert len(h.of_type("response.done")) == done_before == 1  # nothing else to cancel
    truncated = h.of_type("conversation.item.truncated")[-1]
    assert truncated["item_id"] == item_id and truncated["audio_end_ms"] == 300
    assert h.stages.sent("thinker", StopGeneration)


def test_without_interrupt_response_speech_over_a_reply_leaves_it_alone():
    async def scenario(h):
        await h.client("session.update", session={"audio": {"input": {"turn_detection": {
            "type": "server_vad", "interrupt_response": False}}}})
        await spoken_reply_playing(h)
        await h.speak(300)
        return h

    h = run(scenario)
    assert not h.of_type("response.done") and not h.of_type("conversation.item.truncated")
    assert len(h.of_type("input_audio_buffer.speech_started")) == 2


def test_response_cancel_stops_the_reply_for_the_client_reason():
    async def scenario(h):
        await spoken_reply_playing(h)
        await h.client("response.cancel")
        await h.client("response.cancel")  # nothing left to cancel
        return h

    h = run(scenario)
    done = h.of_type("response.done")[-1]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"
    assert done["usage"]["liveserve"]["heard_ms"] == 300.0  # cut where playback stood
    assert h.of_type("error")[-1]["error"]["code"] == "response_cancel_not_active"


def test_a_clients_truncate_after_the_reply_cuts_the_context_and_reports_the_unheard_work():
    async def scenario(h):
        item_id, _ = await spoken_reply_playing(h, finished=True)
        await h.client("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=160)
        await h.client("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=5000)
        return h, item_id

    h, item_id = run(scenario)
    truncated = h.of_type("conversation.item.truncated")[-1]
    assert truncated["audio_end_ms"] == 160 and truncated["liveserve"]["unheard_audio_tokens"] == 6
    assert h.stages.sent("thinker", StopGeneration)
    assert h.of_type("error")[-1]["error"]["param"] == "audio_end_ms"  # past the item's 640 ms of audio


def test_a_clients_truncate_after_the_servers_barge_in_cut_is_answered_not_refused():
    """What the SDKs do: on speech_started they truncate the reply where their own playback stood, which
    may be past where the server already cut it."""
    async def scenario(h):
        item_id, _ = await spoken_reply_playing(h)
        await h.speak(300)  # the server cuts the reply at 300 ms
        await h.client("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=420)
        return h, item_id

    h, item_id = run(scenario)
    server_cut, client_cut = h.of_type("conversation.item.truncated")[-2:]
    assert (server_cut["audio_end_ms"], client_cut["audio_end_ms"]) == (300, 420)
    assert client_cut["item_id"] == item_id and not h.of_type("error")


def test_playback_acks_move_what_the_stages_see():
    async def scenario(h):
        _, ids = await spoken_reply_playing(h)
        await h.client("playback.ack", played_ms=100)  # the client lags the real-time model
        acked = h.orch.board.playback(ids["vocoder"])
        await h.client("playback.ack", played_ms=50, item_id="someone_else")  # a stale item: ignored
        return acked, h.orch.board.playback(ids["vocoder"]), h.clock.t

    acked, after_stale, now = run(scenario)
    assert acked.started and acked.buffer_ms(now) == pytest.approx(640 - 100)
    assert after_stale == acked


def test_a_manual_commit_and_a_text_reply_without_turn_detection():
    async def scenario(h):
        await h.client("session.update", session={"audio": {"input": {"turn_detection": None}}})
        await h.speak(600)
        await h.client("input_audio_buffer.commit")
        await h.client("response.create", response={"output_modalities": ["text"]})
        return h

    h = run(scenario)
    assert not h.of_type("input_audio_buffer.speech_started")  # no VAD
    assert h.of_type("input_audio_buffer.committed") and h.of_type("response.created")
    assert h.stages.added("talker") == []  # a text reply: nothing to speak


def test_a_user_item_deleted_while_its_audio_is_encoded_never_enters_the_context():
    async def scenario(h):
        await h.client("session.update", session={"audio": {"input": {"turn_detection": None}}})
        await h.speak(600)
        await h.client("input_audio_buffer.commit")  # the item's audio goes to the encoder
        item = h.of_type("input_audio_buffer.committed")[0]["item_id"]
        await h.client("conversation.item.delete", item_id=item)  # deleted before it entered
        h.stages.encode_the_rest(8, WIDTH)  # its embeddings arrive after the delete
        await h.settle()
        return h, item

    h, item = run(scenario)
    assert h.of_type("conversation.item.deleted")[0]["item_id"] == item and not h.of_type("error")
    assert h.controller.session.context.segment(item) is None
    assert h.stages.sent("thinker", AppendInput) == []  # the thinker never saw it


def test_duplex_frames_go_to_the_encoder_at_the_frame_ticks():
    async def scenario(h):
        await h.client("session.update", session={"liveserve": {"duplex": True}})
        await h.speak(200)  # 2.5 frames of 80 ms
        h.orch.duplex.tick(h.clock())
        return h

    h = run(scenario)
    frames = [c for c in h.stages.sent("encoder", AppendInput) if c.request_id.role == "duplex-encoder"]
    assert len(frames) == 1 and len(frames[0].data) == 2 * 1280  # two whole 80 ms frames of 16 kHz audio


def test_a_turn_whose_user_input_failed_is_not_answered():
    async def scenario(h):
        await h.speak(600, then_silence_ms=700)  # a spoken turn: committed, and VAD starts its reply
        encoder_id, = h.stages.added("encoder")
        h.stages.sink("encoder", [StageOutput(encoder_id, error="encoder is down")])
        await h.settle()
        return h

    h = run(scenario)
    assert h.of_type("error")[-1]["error"]["code"] == "item_rejected"
    done = h.of_type("response.done")[-1]["response"]
    assert done["status"] == "failed" and "the user's input could not enter the context" in \
        done["status_details"]["error"]["message"]
    assert h.stages.sent("thinker", AppendInput) == []  # nothing was generated without the user's words


def test_audio_routed_before_the_session_wakes_goes_out_whole_and_in_order():
    async def scenario(h):
        await h.speak(600, then_silence_ms=700)
        encoder_id, = h.stages.added("encoder")
        h.stages.encode(encoder_id, 8, WIDTH)
        await h.settle()
        turn = h.controller.turn
        h.stages.think(h.thinker_id, turn.turn_id, [10, 11, 12, 13], WIDTH)
        h.stages.speak(turn.reply.ids["talker"], 8)
        await h.settle()
        h.stages.voice(turn.reply.ids["vocoder"], 2 * FRAME)  # two chunks routed in one go: one wake-up hands both on
        h.stages.voice(turn.reply.ids["vocoder"], 6 * FRAME)
        await h.settle()
        return h.of_type("response.output_audio.delta"), h.orch.board.playback(turn.reply.ids["vocoder"])

    deltas, vocoder_state = run(scenario)
    assert [len(base64.b64decode(d["delta"])) // 2 for d in deltas] == [2 * FRAME, 6 * FRAME]
    assert vocoder_state.started and vocoder_state.buffer_ms(0.0) == pytest.approx(640)  # the stages heard of both


def test_a_final_transcript_from_the_pause_fills_the_committed_item():
    """The pause's pass read all the speech, so closing the speech gives the final at once: the commit is
    reported first, and the user item is done with its transcript."""
    async def scenario(h):
        await h.client("session.update", session={"type": "realtime", "audio": {"input": {
            "transcription": {"model": "whisper-1"}}}})
        await h.speak(600, then_silence_ms=300)  # the user pauses: the ASR stage transcribes what was sent
        asr_id, = h.stages.added("asr")
        sent = sum(len(c.data) for c in h.stages.sent("asr", AppendInput) if c.data is not None)
        h.stages.sink("asr", [StageOutput(asr_id, Transcript("What is the capital of France?", False, sent))])
        await h.settle()
        await h.speak(0, then_silence_ms=400)  # the pause ends the turn
        return h

    h = asyncio.run(harnessed_voice(scenario))
    types = h.types()
    completed = h.of_type("conversation.item.input_audio_transcription.completed")
    assert completed and types.index("input_audio_buffer.committed") < types.index(completed[0]["type"])
    user_done = next(e for e in h.of_type("conversation.item.done") if e["item"]["role"] == "user")
    assert user_done["item"]["content"] == [{"type": "input_audio", "transcript": "What is the capital of France?"}]


def test_a_long_session_keeps_only_its_latest_replies_turns():
    async def scenario(h):
        await h.client("conversation.item.create", item={"type": "message", "role": "user",
                                                         "content": [{"type": "input_text", "text": "Hi."}]})
        h.stages.encode_the_rest(4, WIDTH)
        items = []
        for _ in range(3 * MEASURED_REPLIES):  # one reply after another, each completed
            await h.client("response.create", response={"output_modalities": ["text"]})
            turn = h.controller.turn
            items.append(turn.item_id)
            h.stages.think(h.thinker_id, turn.turn_id, [10], WIDTH, finish="stop")
            await h.settle()
            assert h.controller.turn is None and len(h.controller.replies) <= MEASURED_REPLIES  # the bound
        return items, h.controller.replies, h.of_type("response.done")

    items, replies, done = run(scenario)
    assert len(done) == 3 * MEASURED_REPLIES and {d["response"]["status"] for d in done} == {"completed"}
    kept = [item for item in items if replies.get(item) is not None]
    assert kept == items[-MEASURED_REPLIES:]  # the latest replies, a truncation may still measure them
