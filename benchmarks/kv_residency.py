"""Issue 6's experiment: the interactive multi-turn trace under KV pressure, one run per policy.

Runs `liveserve bench replay` on benchmarks/configs/kv_pressure.yaml (a thinker KV
pool smaller than the sessions' total, a 2 Gbps emulated device-host link) with the
spoken prompts of benchmarks/traces/interactive_kv.jsonl, for each policy and round,
then tabulates and plots what the result JSONs say: P90 audio TTFP, reload time on
and off the critical path, the off-path share, peak and mean device KV blocks
(thinker and talker), evictions, preload outcomes and preemptions.

    .venv/bin/python benchmarks/kv_residency.py --rounds 2            # ~9 minutes
    .venv/bin/python benchmarks/kv_residency.py --rounds 3 --first-round 6 --policies fcfs-lru,liveserve-fcfs
    .venv/bin/python benchmarks/kv_residency.py --report-only          # tables and plot from existing runs
    .venv/bin/python benchmarks/kv_residency.py --config my_pool.yaml --out benchmarks/results/kv_my_pool

Results go to benchmarks/results/kv/ or --out (<policy>-<round>.json, summary.md, kv_residency.png).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lab.replay.presets import PRESETS  # noqa: E402

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "results" / "kv"
CONFIG = ROOT / "configs" / "kv_pressure.yaml"
POLICIES = ("fcfs-lru", "liveserve-fcfs", "liveserve")
REPLAY = ["bench", "replay", "--dataset", "interactive", "--dataset-path", str(ROOT / "traces" / "interactive_kv.jsonl"),
          "--num-requests", "16", "--prompt-audio", "--trace-arrivals"]


def run(policy: str, round_: int, config: Path, out_dir: Path) -> None:
    out = out_dir / f"{policy}-{round_}.json"
    command = [sys.executable, "-m", "liveserve.cli", *REPLAY, "--config", str(config), "--policy", policy,
               "--result-json", str(out)]
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def row(path: Path) -> dict:
    result = json.loads(path.read_text())
    kv = result["kv"]
    on, off = kv["reload_ms_on_path"] or 0.0, kv["reload_ms_off_path"] or 0.0
    return {"run": path.stem, "ttfp_p90_ms": result["audio_ttfp_ms"]["p90"], "ttfp_p50_ms": result["audio_ttfp_ms"]["p50"],
            "reload_on_ms": on, "reload_off_ms": off, "off_share": off / (on + off) if on + off else None,
            "peak_blocks": kv["peak_device_blocks"], "mean_blocks": kv.get("mean_device_blocks"),
            "evictions": kv["evictions"], "preemptions": kv["preemptions"],
            "preload_hits": kv["preload_hits"], "continuity_ok": result["continuity_ok_rate"]}


def table(rows: list[dict]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r[c]) for c in columns) + " |")
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def plot(rows: list[dict], path: Path) -> None:
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    names = [r["run"] for r in rows]
    axes[0].bar(names, [r["ttfp_p90_ms"] for r in rows])
    axes[0].set_title("P90 audio TTFP (ms)")
    axes[1].bar(names, [r["reload_on_ms"] for r in rows], label="on the critical path")
    axes[1].bar(names, [r["reload_off_ms"] for r in rows], bottom=[r["reload_on_ms"] for r in rows],
                label="off it (preload)")
    axes[1].set_title("KV reload time (ms, whole run)")
    axes[1].legend()
    axes[2].bar(names, [r["peak_blocks"] for r in rows], label="peak")
    with_mean = [r for r in rows if r["mean_blocks"] is not None]  # runs before 2026-11-25 lack it
    axes[2].bar([r["run"] for r in with_mean], [r["mean_blocks"] for r in with_mean], label="mean over the run")
    axes[2].set_title("device KV blocks")
    axes[2].legend()
    for axis in axes:
        axis.tick_params(axis="x", rotation=45)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--first-round", type=int, default=1, help="number of the first round (earlier results stay)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated presets, run in this order")
    parser.add_argument("--config", type=Path, default=CONFIG, help="server config (default: kv_pressure.yaml)")
    parser.add_argument("--out", type=Path, default=OUT, help="directory for the runs, summary.md and the plot")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    policies = args.policies.split(",")
    unknown = [name for name in policies if name not in PRESETS]
    if unknown:
        parser.error(f"--policies: unknown preset(s) {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    if args.rounds < 1 or args.first_round < 1:
        parser.error("--rounds and --first-round must be at least 1")
    if not args.config.is_file():
        parser.error(f"--config: no such file: {args.config}")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for round_ in range(args.first_round, args.first_round + args.rounds):
            for policy in policies:
                run(policy, round_, args.config, args.out)
    rows = [row(path) for path in sorted(args.out.glob("*-[0-9]*.json"))]
    if not rows:
        sys.exit(f"no runs in {args.out}")
    summary = table(rows)
    (args.out / "summary.md").write_text(summary + "\n")
    plot(rows, args.out / "kv_residency.png")
    print(summary)
    print(f"written: {args.out / 'summary.md'}, {args.out / 'kv_residency.png'}")


if __name__ == "__main__":
    main()
