"""Real speech to stream without end: the fixture clips, one after another, looped."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lab.client.audio import load_pcm16, silence
from lab.clips import clips_dir
from liveserve.audio_io import AudioError

PAUSE_MS = 400  # between clips, as between a speaker's sentences


class LoopedSpeech:
    """24 kHz mono int16 speech read as an endless loop: `chunk(start, n)` wraps around."""

    def __init__(self, pcm: np.ndarray) -> None:
        if pcm.dtype != np.int16 or pcm.ndim != 1 or pcm.size == 0:
            raise AudioError(f"looped speech must be non-empty 1-D int16, got {pcm.dtype} {pcm.shape}")
        self.pcm = pcm

    @classmethod
    def from_dir(cls, directory: Path | None = None) -> LoopedSpeech:
        """Every WAV in `directory` (default: the shipped speech clips), in name order, resampled
        to 24 kHz and separated by short pauses."""
        directory = directory or clips_dir()
        paths = sorted(Path(directory).glob("*.wav"))
        if not paths:
            raise AudioError(f"no WAV files to stream in {directory}")
        pause = silence(PAUSE_MS)
        return cls(np.concatenate([part for path in paths for part in (load_pcm16(path), pause)]))

    @property
    def num_samples(self) -> int:
        return int(self.pcm.size)

    def chunk(self, start: int, num_samples: int) -> np.ndarray:
        """`num_samples` samples from position `start` of the loop."""
        indices = (start + np.arange(num_samples)) % self.pcm.size
        return self.pcm[indices]
