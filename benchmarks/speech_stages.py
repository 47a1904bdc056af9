"""Step times of the speech stages on one thread each: the ASR's final pass over a spoken question, the TTS's
first segment of a streamed reply, and the TTS's real-time factor.

    python benchmarks/speech_stages.py [--repeats 10]

Each figure is the wall time of the engine step that produced the output (the model call plus the
stage's bookkeeping), after one warm-up; BLAS, CTranslate2 and onnxruntime are pinned to one thread.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from lab.clips import clips_dir  # noqa: E402
from liveserve.audio_io import read_wav, resample  # noqa: E402
from stages.commands import AddRequest, AppendInput  # noqa: E402
from stages.config import SchedulerConfig  # noqa: E402
from stages.factory import build_engine  # noqa: E402
from stages.models.asr_whisper import WhisperConfig  # noqa: E402
from stages.models.tts_piper import SAMPLE_RATE, PiperVoiceConfig  # noqa: E402
from stages.requests import ASRRequest, TTSRequest  # noqa: E402
from stages.stage_spec import StageSpec  # noqa: E402

REPLY = "The capital of France is Paris. It is a large city."


def timed_steps(engine, commands) -> list[tuple[float, list]]:
    """Submit `commands`, then step until the engine holds no request: (seconds, outputs) of every step."""
    engine.submit_all(commands)
    steps = []
    while True:
        started = time.perf_counter()
        outputs = engine.step()
        steps.append((time.perf_counter() - started, outputs))
        if not engine.scheduler.requests:
            return steps


def engine(kind: str, model) -> object:
    return build_engine(StageSpec(kind, kind, model, SchedulerConfig(), threads=1), lambda outputs: None,
                        time.monotonic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    repeats = parser.parse_args().repeats
    samples, rate = read_wav(clips_dir() / "q_capital_espeak_24k.wav")
    speech = resample(samples, rate, 16000)
    asr, tts = engine("asr", WhisperConfig()), engine("tts", PiperVoiceConfig())
    finals, firsts, rtfs = [], [], []
    for k in range(repeats + 1):
        steps = timed_steps(asr, [AddRequest(ASRRequest(f"a{k}", 0.0)), AppendInput(f"a{k}", speech, close=True)])
        final = next(s for s, outputs in steps if any(o.payload is not None for o in outputs))
        words = [AddRequest(TTSRequest(f"t{k}", 0.0, sample_rate=SAMPLE_RATE))]
        words += [AppendInput(f"t{k}", w if i == 0 else " " + w) for i, w in enumerate(REPLY.split(" "))]
        steps = timed_steps(tts, [*words, AppendInput(f"t{k}", None, close=True)])
        spoken = [(s, o.payload) for s, outputs in steps for o in outputs if o.payload is not None]
        if k:  # the first round warms up
            finals.append(final)
            firsts.append(spoken[0][0])
            rtfs.append(sum(s for s, _ in spoken) / (sum(len(p.pcm) for _, p in spoken) / SAMPLE_RATE))
    print(f"ASR final pass, {len(speech) / 16000:.2f} s clip: {_summary(finals, 1000)} ms")
    print(f"TTS first segment ({spoken[0][1].text!r}): {_summary(firsts, 1000)} ms")
    print(f"TTS real-time factor, whole reply ({len(spoken)} segments): {_summary(rtfs, 1)}")


def _summary(values: list[float], scale: float) -> str:
    values = sorted(v * scale for v in values)
    return f"median {statistics.median(values):.3g}, min {values[0]:.3g}, max {values[-1]:.3g} (n={len(values)})"


if __name__ == "__main__":
    main()
