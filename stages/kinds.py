"""The kinds of stage a pipeline is made of, and what each takes in and gives out."""

from __future__ import annotations

from enum import StrEnum


class StageKind(StrEnum):
    ENCODER = "encoder"  # the user's speech -> rows for the thinker's context
    THINKER = "thinker"  # the resident context: generates the reply's text
    TALKER = "talker"  # the text's hidden states -> codec frames
    VOCODER = "vocoder"  # codec frames -> reply audio
    ASR = "asr"  # the user's speech -> the text of what was said
    TTS = "tts"  # the reply's text -> reply audio


class Payload(StrEnum):
    """What crosses an edge between two stages."""

    AUDIO = "audio"  # the user's speech, 16 kHz
    EMBEDDINGS = "embeddings"  # rows the thinker reads in place of placeholder tokens
    HIDDEN_STATES = "hidden_states"  # the thinker's hidden state of each spoken token
    CODEC_FRAMES = "codec_frames"  # audio codec ids, 80 ms each
    PCM = "pcm"  # reply audio, 24 kHz
    TEXT = "text"  # words: what the user said (ASR), what the reply says (the thinker's tokens, detokenized)


# What each kind takes in and gives out; a kind with several gives the first its target takes.
CONSUMES = {StageKind.ENCODER: (Payload.AUDIO,), StageKind.THINKER: (Payload.EMBEDDINGS, Payload.TEXT),
            StageKind.TALKER: (Payload.HIDDEN_STATES,), StageKind.VOCODER: (Payload.CODEC_FRAMES,),
            StageKind.ASR: (Payload.AUDIO,), StageKind.TTS: (Payload.TEXT,)}
PRODUCES = {StageKind.ENCODER: (Payload.EMBEDDINGS,), StageKind.THINKER: (Payload.HIDDEN_STATES, Payload.TEXT),
            StageKind.TALKER: (Payload.CODEC_FRAMES,), StageKind.VOCODER: (Payload.PCM,),
            StageKind.ASR: (Payload.TEXT,), StageKind.TTS: (Payload.PCM,)}


def carried(source: StageKind, target: StageKind) -> Payload | None:
    """What stage `source` feeds stage `target` (None: nothing it gives is what `target` takes)."""
    return next((payload for payload in PRODUCES[source] if payload in CONSUMES[target]), None)
