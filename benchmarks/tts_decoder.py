"""Piper's decoder in float32 (the graph on onnxruntime) against bfloat16 (in torch), back to back: the time a
segment takes, the real-time factor, and the words Whisper tiny.en hears when it transcribes the audio back.

    python benchmarks/tts_decoder.py [--rounds 4] [--out benchmarks/results/tts_decoder.json]

Each round speaks every reply once with each decoder, alternating which goes first, on one thread. Piper
samples noise, so every round's audio differs: the word errors are summed over the rounds.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from lab.word_error import word_errors  # noqa: E402
from liveserve.audio_io import resample  # noqa: E402
from stages.models.asr_whisper import SAMPLE_RATE as ASR_RATE  # noqa: E402
from stages.models.asr_whisper import WhisperASR, WhisperConfig  # noqa: E402
from stages.models.tts_piper import DECODER_DTYPES, SAMPLE_RATE, PiperTTS, PiperVoiceConfig  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "tts_decoder.json"
REPLIES = (
    "The capital of France is Paris. It is a large city.",
    "Sure, here are three things you can do this weekend: go hiking, visit a museum, or cook a new recipe.",
    "A spider has eight legs, and most spiders have eight eyes as well.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "I would start with a short walk every morning and drink more water during the day.",
    "Berlin is the capital of Germany, and it is known for its history and its music.",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    voices = {dtype: PiperTTS.load(PiperVoiceConfig(decoder_dtype=dtype), threads=1) for dtype in DECODER_DTYPES}
    asr = WhisperASR.load(WhisperConfig(), threads=1)
    for voice in voices.values():
        voice.synthesize(REPLIES[0])  # warm-up
    seconds = {dtype: [] for dtype in voices}
    audio_s = {dtype: [] for dtype in voices}
    errors = {dtype: 0 for dtype in voices}
    for round_index in range(args.rounds):
        order = list(voices) if round_index % 2 == 0 else list(reversed(voices))
        for reply in REPLIES:
            for dtype in order:
                started = time.perf_counter()
                audio = voices[dtype].synthesize(reply)
                seconds[dtype].append(time.perf_counter() - started)
                audio_s[dtype].append(len(audio) / SAMPLE_RATE)
                errors[dtype] += word_errors(reply, asr.transcribe(resample(audio, SAMPLE_RATE, ASR_RATE)))
    words = args.rounds * sum(len(reply.split()) for reply in REPLIES)
    summary = {dtype: {"segment_ms_p50": 1000 * statistics.median(seconds[dtype]),
                       "real_time_factor": sum(seconds[dtype]) / sum(audio_s[dtype]),
                       "word_errors": errors[dtype], "words": words} for dtype in voices}
    for dtype, row in summary.items():
        print(f"{dtype:>9}: segment p50 {row['segment_ms_p50']:.0f} ms, real-time factor "
              f"{row['real_time_factor']:.4f}, word errors {row['word_errors']} / {words}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rounds": args.rounds, "decoders": summary}, indent=2))


if __name__ == "__main__":
    main()
