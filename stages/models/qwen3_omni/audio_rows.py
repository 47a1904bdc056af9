"""How many thinker rows Qwen3-Omni's audio encoder makes of an utterance."""

from __future__ import annotations

from dataclasses import dataclass

ROWS_PER_WINDOW = 13  # what a whole window of 2 * n_window feature frames becomes


@dataclass(frozen=True)
class AudioRows:
    """`rows(num_samples)` of 16 kHz audio (a feature frame per `hop_length` samples: the feature extractor
    drops the STFT's last), and `of_frames(num_feature_frames)`: the reference's _get_feat_extract_output_lengths
    (13 rows per whole window of 2 * n_window frames, the rest through three stride-2 convolutions). A frozen
    dataclass, so a request that holds it crosses process boundaries."""

    n_window: int
    hop_length: int = 160

    def of_frames(self, num_feature_frames: int) -> int:
        window = 2 * self.n_window
        rest = (num_feature_frames % window - 1) // 2 + 1
        return ((rest - 1) // 2 + 1 - 1) // 2 + 1 + num_feature_frames // window * ROWS_PER_WINDOW

    def __call__(self, num_samples: int) -> int:
        return self.of_frames(num_samples // self.hop_length)
