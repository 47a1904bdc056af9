"""LiveServe's policies against the vLLM-Omni baselines, back to back: on tiny-omni-cpu (the lab's default),
and on the voice agent (voice-cpu, the embedded default) with real models.

Each round runs every point under every policy preset, one replay at a time on a fresh server,
alternating the policies' order from point to point and round to round (A B, B A, ...), so that
a machine whose speed drifts favours neither. Then it prints one table per point and writes
`summary.json` beside the runs.

    python3 benchmarks/prepare_sharegpt.py                   # the ShareGPT points need it
    python3 benchmarks/default_vs_baseline.py --out benchmarks/results/default_vs_baseline --rounds 2

Points (`--points`, default all):
- `user-spoken` / `user-text`: one user, 20 turns of one session (traces/one_user_20_turns.jsonl),
  prompts spoken (server VAD ends the turn) or sent as text items; no load.
- `light`: 96 ShareGPT requests, 12 in flight, barge-in 0.5 (a slot frees at the last audio chunk).
- `voice-users`: 96 ShareGPT requests by 48 voice users (a slot frees once the reply was heard),
  barge-in 0.5.
- `agent-N` (N = 2, 4, 6, 8, 12, 16, 24): the voice agent (Whisper tiny.en, SmolLM2-135M, Piper) with N voice users
  in flight, 3N sessions of 3 spoken turns each (traces/voice_agent_users.jsonl: questions of 6-14 tokens,
  replies of 12-40), a slot freed once the last reply was heard, barge-in 0.5.

    python3 benchmarks/make_interactive_trace.py --out benchmarks/traces/voice_agent_users.jsonl --sessions 96 \
        --turns 3 --prompt-tokens 6,14 --reply-tokens 12,40 --gap-s 1,3 --stagger-s 0.5 --seed 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAREGPT = ["--dataset", "sharegpt", "--dataset-path", str(HERE / "data" / "ShareGPT_V3_prefix.json"),
            "--num-requests", "96", "--seed", "7", "--barge-in-prob", "0.5"]
ONE_USER = ["--dataset", "interactive", "--dataset-path", str(HERE / "traces" / "one_user_20_turns.jsonl"),
            "--num-requests", "1"]
AGENT = ["--config", "voice-cpu", "--dataset", "interactive", "--dataset-path", str(HERE / "traces" / "voice_agent_users.jsonl"),
         "--prompt-audio", "--hold-until-heard", "--barge-in-prob", "0.5", "--seed", "7"]
POINTS = {
    "user-spoken": [*ONE_USER, "--prompt-audio"],
    "user-text": ONE_USER,
    "light": [*SHAREGPT, "--max-concurrency", "12"],
    "voice-users": [*SHAREGPT, "--max-concurrency", "48", "--hold-until-heard"],
    **{f"agent-{n}": [*AGENT, "--num-requests", str(3 * n), "--max-concurrency", str(n)]
       for n in (2, 4, 6, 8, 12, 16, 24)},
}
FIGURES = {
    "TTFP p50 ms": lambda r: r["audio_ttfp_ms"]["p50"],
    "TTFP p90 ms": lambda r: r["audio_ttfp_ms"]["p90"],
    "continuity": lambda r: r["continuity_ok_rate"],
    "RTF p90": lambda r: r["audio_rtf"]["p90"],
    "failed": lambda r: r["num_failed"],
    "waste": lambda r: r["wasted_token_ratio"],
    "reload on path ms": lambda r: (r["kv"] or {}).get("reload_ms_on_path"),
    "preemptions": lambda r: (r["kv"] or {}).get("preemptions"),
}


def run_point(point: str, policy: str, out: Path) -> dict:
    command = [sys.executable, "-m", "liveserve.cli", "bench", "replay", *POINTS[point], "--policy", policy,
               "--result-json", str(out)]
    print(f"$ {' '.join(command[2:])}", flush=True)
    subprocess.run(command, stdout=subprocess.DEVNULL)  # exit 1 when requests failed: they are in the result
    if not out.exists():
        raise SystemExit(f"the replay wrote no result: {out}")
    return json.loads(out.read_text())


def table(point: str, runs: dict[str, list[dict]]) -> str:
    lines = [f"### {point}", "", "| figure | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for name, figure in FIGURES.items():
        cells = []
        for results in runs.values():
            values = [v for v in (figure(r) for r in results) if v is not None]
            cells.append(", ".join(f"{v:.3g}" for v in values) or "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--points", default="user-spoken,user-text,light,voice-users",
                        help="comma-separated, of: " + ", ".join(POINTS))
    parser.add_argument("--policies", default="fcfs-lru,liveserve")
    args = parser.parse_args()
    points, policies = args.points.split(","), args.policies.split(",")
    runs = {point: {policy: [] for policy in policies} for point in points}
    turn = 0
    for round_index in range(args.rounds):
        for point in points:
            order = policies if turn % 2 == 0 else policies[::-1]
            turn += 1
            for policy in order:
                out = args.out / f"round{round_index + 1}" / f"{point}_{policy}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                runs[point][policy].append(run_point(point, policy, out))
    summary = {point: {policy: [{name: figure(r) for name, figure in FIGURES.items()} for r in results]
                       for policy, results in by_policy.items()} for point, by_policy in runs.items()}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print("\n\n".join(table(point, by_policy) for point, by_policy in runs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
