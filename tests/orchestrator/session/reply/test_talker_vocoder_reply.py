"""tiny-omni's reply shape driven by hand: hidden states to the talker, codec frames to the vocoder, audio
out; playback leads per request; heard audio back to spoken tokens (2 frames a token, 80 ms a frame)."""

from __future__ import annotations

import torch

from orchestrator.session.events import AudioDelta, TurnUsage, UnheardWork
from orchestrator.session.reply.talker_vocoder import TalkerVocoderVoice
from stages.commands import AppendInput
from stages.interaction import PlaybackState
from stages.plan import StageOutput
from stages.requests import ThinkerStep
from tests.orchestrator.conftest import tiny_pipeline
from tests.orchestrator.session.reply.recording_bus import recording_bus

VOICE = TalkerVocoderVoice.of(tiny_pipeline())  # 2 frames per token, 1920 samples (80 ms) per frame, chunks 4 then 8
OWNER = object()


def started_reply(usage: TurnUsage | None = None):
    bus = recording_bus("talker", "vocoder")
    reply = VOICE.reply("s", 0, bus, usage or TurnUsage())
    reply.start(OWNER, 5.0, num_turns=1)
    return reply, bus.stages["talker"], bus.stages["vocoder"]


def step(value: float) -> ThinkerStep:
    return ThinkerStep(7, torch.full((64,), value), None, "s/turn0")


def test_the_requests_carry_the_voice_and_a_seed_per_turn():
    reply, talker, vocoder = started_reply()
    (talker_request,), (vocoder_request,) = talker.added(), vocoder.added()
    assert reply.ids == {"talker": "s/talker#0", "vocoder": "s/vocoder#0"}
    assert talker_request.request_id == "s/talker#0" and talker_request.frames_per_token == 2
    assert talker_request.sampling.seed == VOICE.talker_sampling.seed + 1
    assert talker_request.bos_id == VOICE.talker_bos_id
    assert vocoder_request.request_id == "s/vocoder#0" and vocoder_request.left_context == VOICE.vocoder_left_context


def test_spoken_tokens_become_frames_then_audio():
    reply, talker, vocoder = started_reply()
    # Three spoken tokens: each hidden state goes to the talker on its own (chunks of 1).
    for position, value in ((0, 0.0), (2, 2.0), (3, 3.0)):
        assert reply.speak(position, step(value), "x") is True
    assert [chunk[:, 0].tolist() for chunk in talker.appended()] == [[0.0], [2.0], [3.0]]
    assert reply.end_text() and talker.commands[-1] == AppendInput("s/talker#0", None, close=True)
    # Six codec frames: the first 4 leave as the vocoder's first chunk, the last 2 when the talker finishes.
    for frame in range(6):
        assert reply.on_output("talker", StageOutput("s/talker#0", frame, is_finished=frame == 5)) is None
    assert vocoder.appended() == [[0, 1, 2, 3], [4, 5]] and vocoder.commands[-1].close
    assert reply.usage.codec_frames == 6 and not reply.is_finished
    # The vocoder's audio comes out, counted in 80 ms frames; its end finishes the reply.
    audio = reply.on_output("vocoder", StageOutput("s/vocoder#0", torch.zeros(4 * 1920)))
    assert isinstance(audio, AudioDelta) and len(audio.pcm) == 4 * 1920 and audio.sample_rate == 24000
    assert reply.on_output("vocoder", StageOutput("s/vocoder#0", torch.zeros(2 * 1920), is_finished=True)) is not None
    assert reply.is_finished and (reply.usage.vocoder_frames, reply.usage.audio_samples) == (6, 6 * 1920)


def test_playback_lead_counts_only_frames_that_need_no_more_talker_work():
    reply, _, _ = started_reply()
    for position in range(3):
        reply.speak(position, step(0.0), "x")
    for frame in range(5):  # 4 frames in the vocoder's first chunk, 1 waiting for the next chunk (of 8)
        reply.on_output("talker", StageOutput("s/talker#0", frame))
    reply.publish_playback("s/thinker#0", True, 9.0, 1000.0)
    board = reply.bus.board
    # The 4 queued frames (320 ms) count for the talker and the thinker; the 1 waiting and the 1 still
    # to come fill no whole chunk, so the thinker gets no more; the vocoder has only the delivered audio.
    assert board.playback("s/thinker#0") == PlaybackState(True, 9.0, 320.0)
    assert board.playback("s/talker#0") == PlaybackState(True, 9.0, 320.0)
    assert board.playback("s/vocoder#0") == PlaybackState(True, 9.0, 0.0, delivered_ms=1000.0)


def test_unheard_work_counts_what_had_not_started_playing():
    # 7 generated tokens, of which positions 0, 1, 3, 4 were spoken (8 codec frames, 6 vocoded so far).
    reply, _, _ = started_reply(TurnUsage(text_tokens=7, codec_frames=8, vocoder_frames=6))
    for position in (0, 1, 3, 4):
        reply.speak(position, step(0.0), "x")
    # Nothing played: all of it is unheard.
    assert reply.unheard(0.0) == UnheardWork(0.0, 7, 8, 6)
    # 160 ms: frames 0-1 had started (spoken token 1); the cut keeps position 0, frame 2 onwards is unheard.
    assert reply.unheard(160.0) == UnheardWork(160.0, 6, 6, 4)
    # 170 ms: frame 2 had started too, so spoken token 2 (position 1) counts as heard; positions 0-2 stay.
    assert reply.heard_tokens(4, 170.0) == VOICE.heard_tokens(4, 170.0) == 2 and reply.voice is VOICE
    assert reply.unheard(170.0) == UnheardWork(170.0, 4, 5, 3)
    # Everything played: nothing is unheard.
    assert reply.unheard(10_000.0) == UnheardWork(10_000.0, 0, 0, 0)
