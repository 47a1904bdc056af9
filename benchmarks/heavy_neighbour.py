"""Issue 30's heavy-neighbour benchmark: does one session's heavy input delay another's first audio?

Starts `liveserve serve` (--config, or the lab's default, tiny-omni-cpu) on a free loopback port. A
measured client speaks ordinary turns (the shipped question clips, in real time, server VAD, short replies
played in real time), one fresh session per turn. In blocks alternating A B B A (--rounds times),
a neighbour runs beside it during B blocks, in a process of its own so that building and sending
its messages never delays the measured client. Each neighbour session, over and over:
  six 15 MiB `input_audio_buffer.append` with server VAD on; 8 MiB of `instructions`; 100 s of speech
  in one append with VAD on; VAD off, 110 s of speech in 10 s appends, committed; then it waits for
  the committed item to enter the context (or be refused) and hangs up.
`--neighbour` picks some of those parts (to tell which delays the measured session), `--set`
overrides the server's config. The measured figure is end of speech -> first audio: from when the client sent the audio where the
server's VAD says speech ended to the first audio delta (it counts a server slow to see the end
too; the VAD's silence wait is in both arms). `ttfp_ms` (speech_stopped received -> first audio,
what `liveserve client` reports) is given too. Prints p50/p90 of each arm and writes JSON.

    .venv/bin/python benchmarks/heavy_neighbour.py                      # 2 rounds of A B B A, 8 turns a block
    .venv/bin/python benchmarks/heavy_neighbour.py --rounds 1 --turns 2 --out benchmarks/results/hn_quick.json  # a quick check

Must hold (issue 30): the neighbour moves the measured session's first audio by <= 100 ms at p90.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue
from multiprocessing.synchronize import Event
from pathlib import Path

import numpy as np
import websockets

from lab.client import default_session
from lab.client.audio import SAMPLE_RATE, encode_audio, load_pcm16
from lab.clips import clips_dir
from lab.duplex.speech_loop import LoopedSpeech
from lab.server_process import ServerProcess
from lab.server_target import ServedConfig
from lab.spoken_turn import TURN_TIMEOUT_S, spoken_turn
from liveserve.config.document import Override

OUT = Path(__file__).resolve().parent / "results" / "heavy_neighbour.json"
CLIPS = ("q_capital_espeak_24k.wav", "q_sky_espeak_24k.wav", "q_spider_espeak_24k.wav", "q_tokyo_flite_24k.wav")
REPLY_TOKENS = 8  # short replies: a turn takes ~6 s
MUST_HOLD_MS = 100.0
MIB = 2**20
PARTS = ("huge_appends", "instructions", "long_append", "commit")  # what a neighbour session sends, in order
MARKER_ID = "neighbour-marker"  # an event the server refuses once it handled everything sent before it


# ---------------------------------------------------------------- the measured session


async def measured_block(url: str, clips: list[np.ndarray], turns: int, first: int) -> list[dict]:
    return [await spoken_turn(url, clips[(first + i) % len(clips)], REPLY_TOKENS) for i in range(turns)]


# ---------------------------------------------------------------- the neighbour


def neighbour_messages() -> dict[str, list[str]]:
    """Every message of a neighbour session, built once (JSON text)."""
    speech = LoopedSpeech.from_dir()

    def append(seconds: float, offset: int = 0) -> str:
        pcm = speech.chunk(offset, int(seconds * SAMPLE_RATE))
        return json.dumps({"type": "input_audio_buffer.append", "audio": encode_audio(pcm)})

    def update(**session) -> str:
        return json.dumps({"type": "session.update", "session": {"type": "realtime", **session}})

    vad = default_session()["audio"]["input"]["turn_detection"] | {"create_response": False}
    huge = 15 * MIB * 3 // 4 // 2 / SAMPLE_RATE  # seconds of PCM16 whose base64 is 15 MiB
    return {
        "vad_on": [update(audio={"input": {"turn_detection": vad}})],
        "huge_appends": [append(huge)] * 6,
        "instructions": [update(instructions="Answer briefly. " * (8 * MIB // 16))],
        "long_append": [append(100.0)],
        "vad_off": [update(audio={"input": {"turn_detection": None}})],
        "commit": [append(10.0, offset=i * 10 * SAMPLE_RATE) for i in range(11)]
                  + [json.dumps({"type": "input_audio_buffer.commit"})],
        "marker": [json.dumps({"type": "conversation.item.retrieve", "item_id": "none", "event_id": MARKER_ID})],
    }


async def neighbour_session(url: str, messages: dict[str, list[str]], parts: tuple[str, ...],
                            codes: dict[str, int]) -> None:
    """One heavy session, until every item it committed entered the context or was refused; counts the
    events and error codes it gets back in `codes`."""
    async with websockets.connect(url, max_size=None, compression=None, proxy=None, open_timeout=30) as ws:
        seen: dict[str, int] = {}
        settled = asyncio.Event()

        async def receive() -> None:
            async for message in ws:
                event = json.loads(message)
                error = event.get("error") or {}
                key = f"error:{error.get('code')}" if event.get("type") == "error" else event.get("type", "")
                seen[key] = seen.get(key, 0) + 1
                if error.get("event_id") == MARKER_ID:  # every earlier message handled: its commits counted
                    seen["marker"] = 1
                done = seen.get("conversation.item.done", 0) + seen.get("error:item_rejected", 0)
                if seen.get("marker") and done >= seen.get("input_audio_buffer.committed", 0):
                    settled.set()

        reader = asyncio.create_task(receive())
        plan = ["vad_on", *(p for p in parts if p != "commit"), "vad_off", *(p for p in parts if p == "commit")]
        for part in (*plan, "marker"):
            for message in messages[part]:
                await ws.send(message)
        try:
            await asyncio.wait_for(settled.wait(), TURN_TIMEOUT_S)
        except TimeoutError:
            seen["unsettled"] = 1
        reader.cancel()
        for key, count in seen.items():
            codes[key] = codes.get(key, 0) + count


def run_neighbour(url: str, parts: tuple[str, ...], ready: Event, stop: Event, results: multiprocessing.Queue) -> None:
    """The neighbour process: once its messages are built (`ready`), heavy sessions one after another until
    `stop`; puts its counts on `results`."""
    messages, codes = neighbour_messages(), {"sessions": 0}
    ready.set()

    async def loop() -> None:
        while not stop.is_set():
            await neighbour_session(url, messages, parts, codes)
            codes["sessions"] += 1

    asyncio.run(loop())
    results.put(codes)


class Neighbour:
    """The neighbour in a process of its own, from `start` (returns once it sends) to `stop` (its counts)."""

    def __init__(self, url: str, parts: tuple[str, ...]) -> None:
        context = multiprocessing.get_context("spawn")
        self.ready, self.stopping, self.results = context.Event(), context.Event(), context.Queue()
        self.process = context.Process(target=run_neighbour, name="heavy-neighbour",
                                       args=(url, parts, self.ready, self.stopping, self.results))

    def start(self) -> None:
        self.process.start()
        if not self.ready.wait(TURN_TIMEOUT_S):
            raise RuntimeError("the neighbour process did not start")

    def stop(self) -> dict:
        self.stopping.set()
        try:
            return self.results.get(timeout=3 * TURN_TIMEOUT_S)
        except queue.Empty:
            return {"failure": f"the neighbour process ended without its counts (exit code {self.process.exitcode})"}
        finally:
            self.process.join(TURN_TIMEOUT_S)


# ---------------------------------------------------------------- the run


def run(url: str, rounds: int, turns: int, parts: tuple[str, ...]) -> list[dict]:
    """Blocks of `turns` measured turns, A B B A `rounds` times, the neighbour beside each B."""
    clips = [load_pcm16(clips_dir() / name) for name in CLIPS]
    blocks = []
    for index, arm in enumerate("ABBA" * rounds):
        neighbour = Neighbour(url, parts) if arm == "B" else None
        if neighbour is not None:
            neighbour.start()
        measured = asyncio.run(measured_block(url, clips, turns, first=index * turns))
        block = {"arm": arm, "turns": measured}
        if neighbour is not None:
            block["neighbour"] = neighbour.stop()
        print(f"block {index + 1} ({arm}): " + ", ".join(str(t.get("end_of_speech_ms", t.get("failure")))
                                                      for t in measured) + " ms", flush=True)
        blocks.append(block)
    return blocks


def percentile(values: list[float], q: float) -> float | None:
    return None if not values else float(np.percentile(values, q))


def summarize(blocks: list[dict]) -> dict:
    arms = {}
    for arm in "AB":
        turns = [t for b in blocks if b["arm"] == arm for t in b["turns"]]
        arms[arm] = {measure: {"p50": percentile([t[measure] for t in turns if measure in t], 50),
                               "p90": percentile([t[measure] for t in turns if measure in t], 90)}
                     for measure in ("end_of_speech_ms", "ttfp_ms")}
        arms[arm]["turns"], arms[arm]["failures"] = len(turns), sum("failure" in t for t in turns)
    shift = {measure: arms["B"][measure]["p90"] - arms["A"][measure]["p90"]
             for measure in ("end_of_speech_ms", "ttfp_ms")
             if arms["A"][measure]["p90"] is not None and arms["B"][measure]["p90"] is not None}
    neighbour_failed = any("failure" in b.get("neighbour", {}) for b in blocks)
    holds = ("end_of_speech_ms" in shift and shift["end_of_speech_ms"] <= MUST_HOLD_MS and not arms["B"]["failures"]
             and not neighbour_failed)
    return {"without_neighbour": arms["A"], "with_neighbour": arms["B"], "p90_shift_ms": shift,
            "must_hold": {"p90_shift_max_ms": MUST_HOLD_MS, "holds": holds}}


def print_summary(summary: dict) -> None:
    for name in ("without_neighbour", "with_neighbour"):
        arm = summary[name]
        print(f"{name:>18}: {arm['turns']} turns, {arm['failures']} failed; end of speech -> first audio p50 "
              f"{_ms(arm['end_of_speech_ms']['p50'])}, p90 {_ms(arm['end_of_speech_ms']['p90'])}; "
              f"speech_stopped -> first audio p50 {_ms(arm['ttfp_ms']['p50'])}, p90 {_ms(arm['ttfp_ms']['p90'])}")
    shift = summary["p90_shift_ms"]
    print(f"p90 shift: end of speech {_ms(shift.get('end_of_speech_ms'))}, speech_stopped {_ms(shift.get('ttfp_ms'))}")
    verdict = "holds" if summary["must_hold"]["holds"] else "does NOT hold"
    print(f"must hold: the neighbour moves first audio by <= {MUST_HOLD_MS:g} ms at p90: {verdict}")


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of A B B A blocks (default 2)")
    parser.add_argument("--turns", type=int, default=8, help="measured turns per block (default 8)")
    parser.add_argument("--neighbour", default=",".join(PARTS),
                        help=f"what each neighbour session sends, of {','.join(PARTS)} (default: all; fewer to "
                        "tell what delays the measured session)")
    parser.add_argument("--config", type=Path, help="server config (default: the lab's, tiny-omni-cpu)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], type=Override.parse,
                        metavar="KEY.PATH=VALUE", help="override a key of the server's config (repeatable)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"result JSON (default {OUT})")
    args = parser.parse_args()
    parts = tuple(part for part in PARTS if part in args.neighbour.split(","))
    if not parts or set(args.neighbour.split(",")) - set(PARTS):
        parser.error(f"--neighbour takes some of {','.join(PARTS)}, got {args.neighbour!r}")
    served = ServedConfig.load(args.config, args.overrides)
    with ServerProcess(served.source, served.overrides) as server:
        blocks = run(server.url, args.rounds, args.turns, parts)
    summary = summarize(blocks)
    print_summary(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**served.describe(), "rounds": args.rounds, "turns_per_block": args.turns,
                                    "neighbour": parts,
                                    **summary, "blocks": blocks}, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
