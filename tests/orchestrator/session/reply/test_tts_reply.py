"""The voice agent's reply shape driven by hand: text to the TTS stage, segments of audio back, heard audio
mapped to the words it said (24 kHz, counted in 80 ms frames)."""

from __future__ import annotations

import torch

from orchestrator.datapath.stage_graph import Edge
from orchestrator.session.events import AudioDelta, TurnUsage, UnheardWork
from orchestrator.session.reply.tts import TTSVoice
from stages.interaction import PlaybackState
from stages.kinds import StageKind
from stages.plan import StageOutput
from stages.requests import SpeechSegment, ThinkerStep
from tests.orchestrator.session.reply.recording_bus import recording_bus

VOICE = TTSVoice((Edge(StageKind.THINKER, StageKind.TTS),), 24000, 1920, 80.0, 4, 16)
TOKENS = ["Paris", " is", "", " nice"]  # "" is part of a character: it sends nothing


def spoken_reply():
    bus = recording_bus("tts")
    reply = VOICE.reply("s", 2, bus, TurnUsage(text_tokens=len(TOKENS)))
    reply.start(object(), 5.0, num_turns=3)
    for position, text in enumerate(TOKENS):
        assert reply.speak(position, ThinkerStep(9, torch.zeros(4), None, "s/turn2"), text) is True
    return reply, bus.stages["tts"]


def test_the_text_goes_to_the_tts_stage_as_it_comes():
    reply, tts = spoken_reply()
    (request,) = tts.added()
    assert reply.ids == {"tts": "s/tts#2"} and (request.first_segment_words, request.max_segment_words) == (4, 16)
    assert tts.appended() == ["Paris", " is", " nice"] and reply.spoken_text.starts == [0, 5, 8, 8]
    assert reply.end_text() and tts.commands[-1].close


def test_a_segment_of_audio_is_heard_as_its_words():
    reply, _ = spoken_reply()
    # One segment says all 13 characters in 1 s (12 whole 80 ms frames).
    audio = reply.on_output("tts", StageOutput("s/tts#2", SpeechSegment(0, "Paris is nice", 0, 13, torch.zeros(24000))))
    assert isinstance(audio, AudioDelta) and audio.duration_ms == 1000.0
    assert (reply.usage.audio_samples, reply.usage.vocoder_frames) == (24000, 12)
    # 500 ms: 6.5 characters, so "Paris" and "is" had started; the "" token starts at "nice" and is unheard.
    assert reply.heard_tokens(4, 500.0) == reply.voice.heard_tokens(4, 500.0) == 2
    # Unheard: tokens 2-3; no codec frames; frames 7-11 (frame 6 had started at 480 ms).
    assert reply.unheard(500.0) == UnheardWork(500.0, 2, 0, 5)
    assert reply.unheard(1000.0) == UnheardWork(1000.0, 0, 0, 0)
    assert reply.on_output("tts", StageOutput("s/tts#2", None, is_finished=True)) is None and reply.is_finished


def test_playback_is_published_without_a_lead_and_the_tts_state_counts_the_audio_delivered():
    reply, _ = spoken_reply()
    reply.publish_playback("s/thinker#0", True, 9.0, 1000.0)
    assert reply.bus.board.playback("s/thinker#0") == PlaybackState(True, 9.0)
    assert reply.bus.board.playback("s/tts#2") == PlaybackState(True, 9.0, delivered_ms=1000.0)
