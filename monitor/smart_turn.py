"""Smart Turn v3.2 (ONNX, BSD-2) behind the `TurnCompletion` seam: is the user's turn complete?

The model file ships in the `pipecat-ai` wheel; it is found on disk without importing pipecat.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from monitor.log_mel import log_mel

if TYPE_CHECKING:
    import onnxruntime

SAMPLE_RATE = 16_000
WINDOW_SAMPLES = 8 * SAMPLE_RATE  # the model hears the last 8 s
MODEL_FILE = ("audio", "turn", "smart_turn", "data", "smart-turn-v3.2-cpu.onnx")
INPUT_NAME, INPUT_SHAPE = "input_features", (80, 800)


class TurnCompletion(Protocol):
    """How likely a pause ends the speaker's turn, judged from the audio (stateless, thread-safe)."""

    def probability(self, audio: np.ndarray) -> float:
        """Probability in [0, 1] that the turn whose 16 kHz float32 audio ends `audio` is complete."""
        ...


def model_path() -> Path:
    """Where the installed `pipecat-ai` wheel keeps the model. find_spec locates the package without
    running its `__init__` (which imports much more than this needs)."""
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("semantic_vad needs the pipecat-ai package, which ships the Smart Turn model "
                                  "(pip install pipecat-ai)")
    path = Path(spec.submodule_search_locations[0]).joinpath(*MODEL_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"the installed pipecat-ai has no Smart Turn v3.2 model at {path}")
    return path


@functools.lru_cache(maxsize=1)
def _load_session() -> onnxruntime.InferenceSession:
    """One CPU session shared by every stream (`run` is thread-safe); onnxruntime is imported only here."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_path()), sess_options=options, providers=["CPUExecutionProvider"])
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if [i.name for i in inputs] != [INPUT_NAME] or tuple(inputs[0].shape[1:]) != INPUT_SHAPE or len(outputs) != 1:
        raise ValueError(f"{model_path().name}: expected one input {INPUT_NAME} [batch, 80, 800] and one output, got "
                         f"{[(i.name, i.shape) for i in inputs]} -> {[o.name for o in outputs]}")
    return session


def model_input(audio: np.ndarray) -> np.ndarray:
    """[1, 80, 800] features of the last 8 s of `audio`: shorter audio is zero-padded in front, the 8 s
    are scaled to zero mean and unit variance, then turned into Whisper log-mel features."""
    audio = np.asarray(audio, dtype=np.float32)[-WINDOW_SAMPLES:]
    padded = np.pad(audio, (WINDOW_SAMPLES - len(audio), 0))
    normalized = (padded - padded.mean()) / np.sqrt(padded.var() + 1e-7)
    return log_mel(normalized)[None]


class SmartTurn:
    """Smart Turn v3.2: its single output is already a sigmoid probability that the turn is complete."""

    def __init__(self) -> None:
        self._session = _load_session()

    def probability(self, audio: np.ndarray) -> float:
        (output,) = self._session.run(None, {INPUT_NAME: model_input(audio)})
        return float(np.clip(output.reshape(-1)[0], 0.0, 1.0))
