"""The ASR's window against its words and its cost: Whisper tiny.en (as `voice-cpu` runs it: int8, greedy,
one thread) over the shipped clips, held-out human speech (benchmarks/heldout_speech) and sentences eSpeak NG
speaks at three rates, read through Whisper's whole 30 s window by faster-whisper (what the ASR stage did
before its windows were sized to the speech) and through windows of at least `--windows` seconds.

    .venv/bin/python benchmarks/asr_window.py                       # ~2 min
    .venv/bin/python benchmarks/asr_window.py --windows 10,15 --out benchmarks/results/asr_window.json

Prints, for each reading and set of speech, the word error rate over all its words and the ms a
transcription took (p50), then a batched pass's ms per utterance (the median of three); writes JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from lab.client.audio import load_pcm16
from lab.clips import BARGE_IN_CLIP, SPOKEN_WORDS, clips_dir
from lab.speech import synthesize
from lab.word_error import normalized_words, word_errors
from liveserve.audio_io import resample
from stages.models.asr_whisper import SAMPLE_RATE, WhisperASR, WhisperConfig

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "asr_window.json"
SHIPPED = [name for name in SPOKEN_WORDS if name != BARGE_IN_CLIP]  # the questions and the human reader
SENTENCES = (
    "Who wrote the novel Pride and Prejudice?", "How far is the moon from the earth?",
    "Give me three ideas for a quick dinner tonight.", "What is the weather like in London in spring?",
    "Translate good morning into Spanish please.", "Why do cats purr when they are happy?",
    "How do I reset my password?", "Remind me to call my mother at five o'clock.",
    "What is the difference between a virus and a bacterium?", "Play some relaxing music for the evening.",
    "How long should I boil an egg?", "Which planet is the largest in the solar system?",
    "Can you recommend a good book about history?", "What does a software engineer do all day?",
    "Set a timer for twelve minutes.", "Is it going to rain tomorrow morning?", "How many people live in Berlin?",
    "Explain how a rainbow forms after a storm.", "What is the best way to learn a new language?",
    "Book a table for two at an Italian restaurant.", "Tell me a joke about computers.",
    "What are the symptoms of the common cold?", "Convert one hundred dollars to euros.",
    "Where is the nearest train station?", "Summarize the plot of Romeo and Juliet in two sentences.",
)
RATES = (150, 175, 200)


def speech_16k(pcm16: np.ndarray) -> np.ndarray:
    return resample(pcm16.astype(np.float32) / 32768.0, 24_000, SAMPLE_RATE)


def speech_sets() -> dict[str, list[tuple[str, np.ndarray]]]:
    heldout = json.loads((HERE / "heldout_speech" / "transcripts.json").read_text())
    return {
        "shipped clips": [(SPOKEN_WORDS[name], speech_16k(load_pcm16(clips_dir() / name))) for name in SHIPPED],
        "held-out human": [(text, speech_16k(load_pcm16(HERE / "heldout_speech" / name)))
                           for name, text in heldout.items()],
        "eSpeak sentences": [(text, speech_16k(synthesize(text, rate=RATES[i % len(RATES)])))
                             for i, text in enumerate(SENTENCES)],
    }


def score(transcribe, speech: list[tuple[str, np.ndarray]]) -> dict:
    errors, words, took, texts = 0, 0, [], []
    for reference, audio in speech:
        start = time.perf_counter()
        text = transcribe(audio)
        took.append(time.perf_counter() - start)
        errors += word_errors(reference, text)
        words += len(normalized_words(reference))
        texts.append(text)
    return {"wer": errors / words, "word_errors": errors, "words": words,
            "ms_p50": 1000 * float(np.median(took)), "texts": texts}


def batched_ms_per_utterance(asr: WhisperASR, speech: list[tuple[str, np.ndarray]], size: int,
                             rounds: int = 3) -> float:
    """The median over `rounds` batched passes of `size` utterances, ms an utterance."""
    audios = [audio for _, audio in speech[:size]]
    took = []
    for _ in range(rounds):
        start = time.perf_counter()
        asr.transcribe_batch(audios)
        took.append(1000 * (time.perf_counter() - start) / len(audios))
    return float(np.median(took))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="10,15,30", help="min_window_s values to read with (default 10,15,30)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"result JSON (default {OUT})")
    args = parser.parse_args()
    asr = WhisperASR.load(WhisperConfig(), threads=1)
    readings = {"whole window (faster-whisper)": asr.transcribe_window_by_window}
    for window in args.windows.split(","):
        windowed = WhisperASR(asr.model, replace(asr.config, min_window_s=float(window)))
        readings[f"min_window_s {window}"] = windowed.transcribe
    sets = speech_sets()
    results = {reading: {name: score(transcribe, speech) for name, speech in sets.items()}
               for reading, transcribe in readings.items()}
    for reading, by_set in results.items():
        print(f"{reading}: " + "; ".join(f"{name} WER {r['wer']:.3f} ({r['word_errors']}/{r['words']}), "
                                         f"{r['ms_p50']:.0f} ms" for name, r in by_set.items()))
    batched = {size: batched_ms_per_utterance(asr, sets["eSpeak sentences"], size) for size in (1, 2, 4)}
    print("batched pass, ms an utterance: " + ", ".join(f"{size}: {ms:.0f}" for size, ms in batched.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"readings": results, "batched_ms_per_utterance": batched}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
