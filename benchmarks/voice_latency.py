"""Voice-to-voice latency of the voice agent (configs/voice-cpu.yaml: Whisper tiny.en, SmolLM2-135M,
Piper): end of the user's speech -> first reply audio, unloaded, with its parts.

Starts `liveserve serve` on a free loopback port and speaks the shipped question clips (or, with `--heldout`,
the held-out human speech of benchmarks/heldout_speech) in real time (server VAD: 500 ms of silence ends a
turn; `--turn-detection semantic_vad`: Smart Turn ends the turns it is sure of), one fresh session a turn,
each reply played in real time before the next turn. Each turn runs twice, back to back: with input
transcription off (what a user of the agent gets) and on (the transcript's arrival times the ASR's last
pass; a partial pass may then still be running when speech ends). Prints p50/p90 of each figure and each
question's transcript and answer; writes JSON, with the resident memory of the server and of each stage
process after the last turn.

    .venv/bin/python benchmarks/voice_latency.py                 # 20 turns a mode
    .venv/bin/python benchmarks/voice_latency.py --turns 5 --out benchmarks/results/voice_quick.json
    .venv/bin/python benchmarks/voice_latency.py --heldout --turns 8 --turn-detection semantic_vad

Figures (ms): `end_of_speech_ms` (end of speech -> first audio: the VAD's silence wait, the ASR's last
pass, the LLM up to the first segment's words, the first TTS segment), `endpoint_ms` (end of speech ->
speech_stopped), `ttfp_ms` (speech_stopped -> first audio), `asr_tail_ms` (speech_stopped -> transcript);
and, with transcription on, the word error rate of the transcripts over all their words.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import numpy as np

from lab.client.audio import load_pcm16
from lab.clips import SPOKEN_WORDS, clips_dir
from lab.process_memory import server_rss_mb
from lab.server_process import ServerProcess
from lab.server_target import ServedConfig
from lab.spoken_turn import spoken_turn
from lab.word_error import normalized_words, word_errors
from liveserve.config.document import Override

OUT = Path(__file__).resolve().parent / "results" / "voice_latency.json"
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "voice-cpu.yaml"
QUESTIONS = ("q_capital_espeak_24k.wav", "q_spider_espeak_24k.wav", "q_sky_espeak_24k.wav",
             "q_tokyo_flite_24k.wav", "q_story_espeak_24k.wav")
HELDOUT = Path(__file__).resolve().parent / "heldout_speech"
MODES = {"transcription_off": False, "transcription_on": True}
FIGURES = ("end_of_speech_ms", "endpoint_ms", "ttfp_ms", "asr_tail_ms")
REPLY_TOKENS = 32


def spoken_clips(heldout: bool) -> list[tuple[str, str, np.ndarray]]:
    """(file name, the words said, 24 kHz PCM16) of the shipped questions or the held-out human speech."""
    folder, said = ((HELDOUT, json.loads((HELDOUT / "transcripts.json").read_text())) if heldout
                    else (clips_dir(), {name: SPOKEN_WORDS[name] for name in QUESTIONS}))
    return [(name, words, load_pcm16(folder / name)) for name, words in said.items()]


async def measure(url: str, turns: int, clips: list, turn_detection: dict | None) -> dict[str, list[dict]]:
    timed: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for turn in range(turns):
        name, said, clip = clips[turn % len(clips)]
        for mode, transcription in MODES.items():
            result = await spoken_turn(url, clip, REPLY_TOKENS, transcription, turn_detection)
            timed[mode].append({"clip": name, "said": said, **result})
            print(f"turn {turn + 1:2d} {mode}: {result.get('end_of_speech_ms', result.get('failure'))} ms "
                  f"{result.get('transcript', '')!r} -> {result.get('text', '')!r}", flush=True)
    return timed


def summarize(timed: dict[str, list[dict]]) -> dict:
    summary = {}
    for mode, turns in timed.items():
        figures = {name: [t[name] for t in turns if name in t] for name in FIGURES}
        summary[mode] = {name: {"p50": float(np.percentile(v, 50)), "p90": float(np.percentile(v, 90))}
                         for name, v in figures.items() if v}
        summary[mode]["failures"] = sum("failure" in t for t in turns)
        heard = [t for t in turns if "transcript" in t]
        if heard:
            words = sum(len(normalized_words(t["said"])) for t in heard)
            summary[mode]["wer"] = sum(word_errors(t["said"], t["transcript"]) for t in heard) / words
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="spoken turns per mode (default 20)")
    parser.add_argument("--config", type=Path, default=CONFIG, help=f"server config (default {CONFIG.name})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], type=Override.parse,
                        metavar="KEY.PATH=VALUE", help="override a key of the server's config (repeatable)")
    parser.add_argument("--heldout", action="store_true", help="speak the held-out human speech, not the questions")
    parser.add_argument("--turn-detection", choices=("server_vad", "semantic_vad"),
                        help="the sessions' turn detection (default: the lab client's server VAD, 500 ms)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"result JSON (default {OUT})")
    args = parser.parse_args()
    served = ServedConfig.load(args.config, args.overrides)
    detection = None if args.turn_detection is None else {"type": args.turn_detection}
    with ServerProcess(served.source, served.overrides) as server:
        timed = asyncio.run(measure(server.url, args.turns, spoken_clips(args.heldout), detection))
        rss = server_rss_mb(server.proc.pid)
    summary = {**summarize(timed), "rss_mb": rss}
    print("RSS after the turns, MB: " + ", ".join(f"{name} {mb:.0f}" for name, mb in rss.items())
          + f"; total {sum(rss.values()):.0f}")
    for mode in MODES:
        figures = summary[mode]
        shown = ", ".join(f"{name} p50 {v['p50']:.0f} / p90 {v['p90']:.0f}" for name, v in figures.items()
                          if isinstance(v, dict))
        wer = f", WER {figures['wer']:.3f}" if "wer" in figures else ""
        print(f"{mode}: {shown}{wer}; {figures['failures']} failed")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {**served.describe(), "turns": args.turns, **summary, "timed": timed}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
