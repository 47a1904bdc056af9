"""Issue 23's pressure sweep: thinker pool size x sessions, FCFS+LRU against the default, back to back.

For each session count it generates a seeded multi-turn trace of the held-out shape (prompts
50-120 tokens spoken, replies 110-160 tokens, 4 turns a session, gaps of 1-4 s), runs it with a
pool that fits everything, measures the working set (the thinker's peak device blocks there),
then runs it with pools holding a half and a quarter of that. Every point runs every policy,
alternating their order from point to point and round to round (A B, B A, ...), on a fresh
server with tiny-omni-cpu, `--set` the pool and a 2 Gbps emulated device-host link.
Sessions hold their connection until their last reply has been heard (`--hold-until-heard`):
a user is still there while it plays, so a server that computes replies faster than they
play does not get to free a session's KV earlier than one that paces them.

    .venv/bin/python benchmarks/memory_pressure.py --out benchmarks/results/memory_pressure --rounds 2
    .venv/bin/python benchmarks/memory_pressure.py --out benchmarks/results/memory_pressure --report-only

Results: <out>/<sessions>s/<pool>/<policy>-<round>.json, summary.md (one row a point) and
memory_pressure.png (P90 TTFP, continuity and preemptions against the pool's share of the
working set).
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

HERE = Path(__file__).resolve().parent
FITS_BLOCKS = 4096
SHARES = {"fits": None, "half": 0.5, "quarter": 0.25}
TRACE_SHAPE = ["--turns", "4", "--prompt-tokens", "50,120", "--reply-tokens", "110,160", "--gap-s", "1,4",
               "--stagger-s", "1.25", "--seed", "23"]
FIGURES = {
    "TTFP p50 ms": lambda r: r["audio_ttfp_ms"]["p50"],
    "TTFP p90 ms": lambda r: r["audio_ttfp_ms"]["p90"],
    "continuity": lambda r: r["continuity_ok_rate"],
    "preemptions": lambda r: r["kv"]["preemptions"],
    "reload on path ms": lambda r: r["kv"]["reload_ms_on_path"],
    "reload off path ms": lambda r: r["kv"]["reload_ms_off_path"],
    "peak thinker blocks": lambda r: r["kv"]["peak_device_blocks_by_stage"]["thinker"],
    "peak talker blocks": lambda r: r["kv"]["peak_device_blocks_by_stage"]["talker"],
    "peak thinker host blocks": lambda r: r["kv"]["peak_host_blocks_by_stage"].get("thinker"),
    "skipped stores": lambda r: r["kv"]["fallbacks"].get("store"),
    "completed": lambda r: r["num_completed"],
}


def make_trace(sessions: int, out: Path) -> Path:
    path = out / f"trace_{sessions}s.jsonl"
    subprocess.run([sys.executable, str(HERE / "make_interactive_trace.py"), "--out", str(path),
                    "--sessions", str(sessions), *TRACE_SHAPE], check=True, stdout=subprocess.DEVNULL)
    return path


def replay(trace: Path, sessions: int, blocks: int, policy: str, out: Path) -> dict:
    if not out.exists():
        command = [sys.executable, "-m", "liveserve.cli", "bench", "replay", "--dataset", "interactive",
                   "--dataset-path", str(trace), "--num-requests", str(sessions), "--prompt-audio",
                   "--trace-arrivals", "--hold-until-heard", "--policy", policy,
                   "--set", f"stages.thinker.kv.num_blocks={blocks}", "--set", "stages.thinker.kv.emulated_link_gbps=2.0",
                   "--result-json", str(out)]
        print(f"$ {' '.join(command[2:])}", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(command, stdout=subprocess.DEVNULL)  # exit 1 when requests failed: refused ones count
    if not out.exists():
        raise SystemExit(f"the replay wrote no result: {out}")
    return json.loads(out.read_text())


def sweep(sessions: int, policies: list[str], rounds: int, out: Path) -> None:
    trace, turn = make_trace(sessions, out), 0
    for round_ in range(1, rounds + 1):
        blocks = FITS_BLOCKS
        for pool, share in SHARES.items():
            if share is not None:
                blocks = int(share * working_set(out / f"{sessions}s" / "fits"))
            order = policies if turn % 2 == 0 else policies[::-1]
            turn += 1
            for policy in order:
                replay(trace, sessions, blocks, policy, out / f"{sessions}s" / pool / f"{policy}-{round_}.json")


def working_set(fits: Path) -> int:
    """The thinker's peak device blocks with a pool that fits everything (the largest in round 1, so that
    every round runs the same pools)."""
    return max(int(FIGURES["peak thinker blocks"](json.loads(p.read_text()))) for p in fits.glob("*-1.json"))


def rows(out: Path) -> list[dict]:
    """One row a point and policy, each figure listed round by round."""
    found = []
    for point in sorted(out.glob("*s/*"), key=lambda p: (int(p.parent.name[:-1]), list(SHARES).index(p.name))):
        by_policy: dict[str, list[dict]] = {}
        for path in sorted(point.glob("*.json")):
            by_policy.setdefault(path.stem.rsplit("-", 1)[0], []).append(json.loads(path.read_text()))
        for policy, results in by_policy.items():
            found.append({"sessions": int(point.parent.name[:-1]), "pool": point.name,
                          "blocks": pool_blocks(results[0]), "policy": policy,
                          **{name: [figure(r) for r in results] for name, figure in FIGURES.items()}})
    return found


def pool_blocks(result: dict) -> int:
    prefix = "stages.thinker.kv.num_blocks="
    return next(int(o[len(prefix):]) for o in result["config"]["overrides"] if o.startswith(prefix))


def table(found: list[dict]) -> str:
    columns = list(found[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in found:
        lines.append("| " + " | ".join(_cell(row[c]) for c in columns) + " |")
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


def plot(found: list[dict], path: Path) -> None:
    panels = ("TTFP p90 ms", "continuity", "preemptions")
    figure, axes = plt.subplots(1, len(panels), figsize=(14, 4))
    for key in sorted({(r["sessions"], r["policy"]) for r in found}):
        line = [r for r in found if (r["sessions"], r["policy"]) == key]
        shares = [1.0 if SHARES[r["pool"]] is None else SHARES[r["pool"]] for r in line]
        for axis, name in zip(axes, panels):
            axis.plot(shares, [sum(r[name]) / len(r[name]) for r in line], marker="o",
                      label=f"{key[1]}, {key[0]} sessions")
    for axis, name in zip(axes, panels):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("thinker pool / working set")
        axis.set_title(f"{name} (mean over rounds)")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sessions", default="40", help="comma-separated session counts")
    parser.add_argument("--policies", default="fcfs-lru,liveserve")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for sessions in (int(n) for n in args.sessions.split(",")):
            sweep(sessions, args.policies.split(","), args.rounds, args.out)
    found = rows(args.out)
    if not found:
        sys.exit(f"no runs in {args.out}")
    summary = table(found)
    (args.out / "summary.md").write_text(summary + "\n")
    plot(found, args.out / "memory_pressure.png")
    print(summary)
    print(f"written: {args.out / 'summary.md'}, {args.out / 'memory_pressure.png'}")


if __name__ == "__main__":
    main()
