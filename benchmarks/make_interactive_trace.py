"""A seeded multi-turn voice-session trace for KV-residency experiments (the `interactive` format).

Each session speaks a short prompt (`--prompt-tokens` range: a few seconds of speech
once synthesized), gets a reply of `--reply-tokens` (x 240 ms of audio on tiny-omni),
listens to it, pauses for a reply gap drawn from `--gap-s` and speaks again, for
`--turns` turns; sessions start `--stagger-s` apart on average (exponential). The
recorded timestamp of turn k+1 is turn k's plus the reply's audio plus the gap; the
replay never starts a turn before the previous reply has been heard, so on a loaded
server the real gap is at least the drawn one. Every session keeps its context on
the server between turns, so the device KV needed grows with sessions x turns.

    python3 benchmarks/make_interactive_trace.py --out benchmarks/traces/interactive_kv.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

AUDIO_S_PER_TOKEN = 0.24  # tiny-omni: 3 codec frames of 80 ms per text token


def parse_range(text: str, kind=int) -> tuple:
    low, _, high = text.partition(",")
    return kind(low), kind(high or low)


def session_rows(rng: random.Random, session: int, start_s: float, args: argparse.Namespace) -> list[dict]:
    rows, t = [], start_s
    for turn in range(args.turns):
        reply = rng.randint(*args.reply_tokens)
        rows.append({"session_id": f"s{session:03d}", "timestamp": round(t, 3), "turn": turn,
                     "request_tokens": rng.randint(*args.prompt_tokens), "response_tokens": reply})
        t += reply * AUDIO_S_PER_TOKEN + rng.uniform(*args.gap_s)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--prompt-tokens", type=parse_range, default=(8, 14), help="low,high")
    parser.add_argument("--reply-tokens", type=parse_range, default=(12, 24), help="low,high")
    parser.add_argument("--gap-s", type=lambda s: parse_range(s, float), default=(1.0, 4.0), help="low,high")
    parser.add_argument("--stagger-s", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng, start, rows = random.Random(args.seed), 0.0, []
    for session in range(args.sessions):
        rows += session_rows(rng, session, start, args)
        start += rng.expovariate(1.0 / args.stagger_s)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"{args.sessions} sessions x {args.turns} turns -> {args.out}")


if __name__ == "__main__":
    main()
