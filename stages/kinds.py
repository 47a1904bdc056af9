"""The kinds of stage a pipeline is made of, and what each takes in and gives out."""

from __future__ import annotations

from enum import StrEnum


class StageKind(StrEnum):
    ENCODER = "encoder"  # the user's speech -> rows for the thinker's context
    THINKER = "thinker"  # the resident context: generates the reply's text
    TALKER = "talker"  # the text's hidden states -> codec frames
    VOCODER = "vocoder"  # codec frames -> reply audio


class Payload(StrEnum):
    """What crosses an edge between two stages."""

    AUDIO = "audio"  # the user's speech, 16 kHz
    EMBEDDINGS = "embeddings"  # rows the thinker reads in place of placeholder tokens
    HIDDEN_STATES = "hidden_states"  # the thinker's hidden state of each spoken token
    CODEC_FRAMES = "codec_frames"  # audio codec ids, 80 ms each
    PCM = "pcm"  # reply audio, 24 kHz


CONSUMES = {StageKind.ENCODER: Payload.AUDIO, StageKind.THINKER: Payload.EMBEDDINGS,
            StageKind.TALKER: Payload.HIDDEN_STATES, StageKind.VOCODER: Payload.CODEC_FRAMES}
PRODUCES = {StageKind.ENCODER: Payload.EMBEDDINGS, StageKind.THINKER: Payload.HIDDEN_STATES,
            StageKind.TALKER: Payload.CODEC_FRAMES, StageKind.VOCODER: Payload.PCM}
