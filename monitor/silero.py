"""Silero VAD (ONNX, 16 kHz) behind the `VoiceConfidence` seam."""
from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import onnxruntime

SAMPLE_RATE = 16_000
WINDOW_SAMPLES = 512
CONTEXT_SAMPLES = 64
MODEL_INPUTS = ("input", "state", "sr")
MODEL_OUTPUTS = ("output", "stateN")


class VoiceConfidence(Protocol):
    """Per-window speech probability of one audio stream.

    Implementations are stateful (the stream's recurrent state) and serve one
    stream; `reset()` starts a new stream. One that can score many streams in one
    call also has `probabilities_together` (see SileroVAD's), which VadBatcher uses.
    """

    def speech_probability(self, window: np.ndarray) -> float:
        """Probability in [0, 1] that `window` (512 float32 samples, 16 kHz) is speech."""
        ...

    def reset(self) -> None:
        """Forget all past audio."""
        ...


def _model_path(model_name: str) -> Path:
    """Path of a model file in the `silero-vad` package's data dir.

    Found with find_spec, which locates the package without running its
    `__init__` (that imports torch, ~3 s); `importlib.resources` on
    `silero_vad.data` would run it.
    """
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("SileroVAD needs the silero-vad package (pip install silero-vad)")
    return Path(spec.submodule_search_locations[0]) / "data" / model_name


@functools.lru_cache(maxsize=None)
def _load_session(model_name: str) -> onnxruntime.InferenceSession:
    """One CPU session per model file, shared by every stream (`run` is thread-safe).

    onnxruntime is imported here so that the rest of the package imports without it.
    """
    import onnxruntime as ort

    model = _model_path(model_name).read_bytes()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    io_names = (tuple(i.name for i in session.get_inputs()), tuple(o.name for o in session.get_outputs()))
    if io_names != (MODEL_INPUTS, MODEL_OUTPUTS):
        raise ValueError(f"{model_name}: expected I/O {(MODEL_INPUTS, MODEL_OUTPUTS)}, got {io_names}")
    return session


class SileroVAD:
    """Silero VAD v5-interface model shipped by the `silero-vad` package.

    Model I/O (read from the ONNX file): inputs `input` [batch, 64 + 512]
    (previous window's last 64 samples, then the window), `state`
    [2, batch, 128], `sr` int64 scalar; outputs `output` [batch, 1] and the
    next `stateN`. This wrapper runs batch 1 and carries state and context
    from one window to the next, so windows must be fed in stream order.
    """

    def __init__(self, model_name: str = "silero_vad.onnx") -> None:
        self._session = _load_session(model_name)
        state_dims = next(i.shape for i in self._session.get_inputs() if i.name == "state")
        self._state_shape = tuple(d if isinstance(d, int) else 1 for d in state_dims)
        self._sample_rate = np.array(SAMPLE_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Zero the recurrent state and the 64-sample context."""
        self._state = np.zeros(self._state_shape, dtype=np.float32)
        self._context = np.zeros((1, CONTEXT_SAMPLES), dtype=np.float32)

    def speech_probability(self, window: np.ndarray) -> float:
        """Speech probability of the next 512-sample (32 ms) window of the stream."""
        window = np.asarray(window, dtype=np.float32)
        if window.shape != (WINDOW_SAMPLES,):
            raise ValueError(f"window must have shape ({WINDOW_SAMPLES},), got {window.shape}")
        x = np.concatenate([self._context, window[None, :]], axis=1)
        feeds = {"input": x, "state": self._state, "sr": self._sample_rate}
        probability, self._state = self._session.run(None, feeds)
        self._context = x[:, -CONTEXT_SAMPLES:]
        return float(probability[0, 0])

    @staticmethod
    def probabilities_together(streams: Sequence[SileroVAD], windows: np.ndarray) -> np.ndarray:
        """The next window of each of `streams` (rows of `windows`, [len(streams), 512]) in one model call,
        each stream's state carried on as `speech_probability` carries it; the probabilities, [len(streams)].
        The streams must be distinct and share one model file (ValueError otherwise)."""
        if len({id(s) for s in streams}) < len(streams) or len({id(s._session) for s in streams}) > 1:
            raise ValueError("probabilities_together scores distinct streams of one model file")
        x = np.concatenate([np.concatenate([s._context for s in streams]), windows.astype(np.float32)], axis=1)
        state = np.concatenate([s._state for s in streams], axis=1)
        feeds = {"input": x, "state": state, "sr": streams[0]._sample_rate}
        probability, state = streams[0]._session.run(None, feeds)
        for row, stream in enumerate(streams):
            stream._state = state[:, row : row + 1]
            stream._context = x[row : row + 1, -CONTEXT_SAMPLES:]
        return probability[:, 0]
