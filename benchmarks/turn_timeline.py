"""Where a turn's first audio waits: read a server's traces (`runtime.trace_dir`) and break each
response's audio TTFP (end of the user's turn -> first audio sent) into stage by stage waits.

    liveserve bench replay ... --set runtime.trace_dir=/tmp/trace-a    # or serve with that --set
    python benchmarks/turn_timeline.py /tmp/trace-a [/tmp/trace-b ...]

Per response, from the end of the user's turn t0 (all clock times are time.monotonic, shared by
the server's processes):
- thinker: when the turn's request last got work before its first step after t0 (`ready`: the ASR's
  final, for a voice agent; negative where the work came before the turn ended, a spoken turn's
  encoded speech), that step's start and its end (the reply's first tokens come out of the first
  decode step);
- talker, vocoder (an omni model) or tts (a voice agent): when the turn's request first had work
  (`ready`), its first step's start (`wait`: queued that long) and end (its first output);
- first_audio: the server sent the first audio delta.
Each figure is printed as p50 / p90 in ms over the responses that produced audio, and what
the stage computed while the turn's request queued (other requests in those steps).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

STAGES = ("encoder", "asr", "thinker", "talker", "vocoder", "tts")
SPEECH = ("talker", "vocoder", "tts")  # the stages after the thinker, in order, of either graph


def read_lines(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


class StageTimeline:
    """One stage's steps, indexed by request id: when each got work and each step it ran in."""

    def __init__(self, steps: list[dict]) -> None:
        self.steps = steps
        self.ready: dict[str, list[float]] = defaultdict(list)
        self.runs: dict[str, list[int]] = defaultdict(list)  # request id -> indices of its steps
        for index, step in enumerate(steps):
            for request_id in step["ready"]:
                self.ready[request_id].append(step["t"])
            for request_id, _ in step["run"]:
                self.runs[request_id].append(index)

    def first_run(self, request_id: str, after: float) -> dict | None:
        return next((self.steps[i] for i in self.runs.get(request_id, ()) if self.steps[i]["t"] >= after), None)

    def first_ready(self, request_id: str, after: float) -> float | None:
        return next((t for t in self.ready.get(request_id, ()) if t >= after), None)

    def last_ready(self, request_id: str, until: float) -> float | None:
        return next((t for t in reversed(self.ready.get(request_id, ())) if t <= until), None)

    def queued_behind(self, request_id: str, start: float, end: float) -> tuple[int, float]:
        """Steps run in [start, end) without `request_id`, and their compute seconds."""
        others = [s for s in self.steps if start <= s["t"] < end and all(r != request_id for r, _ in s["run"])]
        return len(others), sum(s["dt"] for s in others)


def breakdown(response: dict, stages: dict[str, StageTimeline]) -> dict[str, float] | None:
    """The response's waits in ms after its turn ended (None without audio or without a trace of it)."""
    t0, figures, requests = response["turn_end"], {}, response["requests"]
    thinker = stages["thinker"].first_run(requests["thinker"], t0)
    speech = [kind for kind in SPEECH if kind in requests]
    if response["first_audio"] is None or thinker is None or not speech:
        return None
    thinker_ready = stages["thinker"].last_ready(requests["thinker"], thinker["t"])  # before t0: speculative work
    if thinker_ready is not None:
        figures["thinker_ready"] = 1000 * (thinker_ready - t0)
    figures["thinker_start"] = 1000 * (thinker["t"] - t0)
    figures["thinker_first_out"] = 1000 * (thinker["t"] + thinker["dt"] - t0)
    for kind in speech:
        request_id = requests[kind]
        ready, first = stages[kind].first_ready(request_id, t0), stages[kind].first_run(request_id, t0)
        if ready is None or first is None:
            return None
        behind, behind_s = stages[kind].queued_behind(request_id, ready, first["t"])
        figures.update({f"{kind}_ready": 1000 * (ready - t0), f"{kind}_wait": 1000 * (first["t"] - ready),
                        f"{kind}_first_out": 1000 * (first["t"] + first["dt"] - t0),
                        f"{kind}_steps_behind": behind, f"{kind}_ms_behind": 1000 * behind_s})
    figures["first_audio"] = 1000 * (response["first_audio"] - t0)
    return figures


def summarize(trace_dir: Path) -> tuple[int, dict[str, tuple[float, float]]]:
    stages = {kind: StageTimeline(read_lines(trace_dir / f"{kind}.jsonl")) for kind in STAGES
              if (trace_dir / f"{kind}.jsonl").exists()}
    rows = [row for response in read_lines(trace_dir / "responses.jsonl") if (row := breakdown(response, stages))]
    keys = dict.fromkeys(key for row in rows for key in row)  # thinker_ready is absent where no ready is traced
    columns = {key: [row[key] for row in rows if key in row] for key in keys}
    return len(rows), {key: (statistics.median(values), _p90(values)) for key, values in columns.items()}


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dirs", type=Path, nargs="+")
    args = parser.parse_args()
    summaries = [summarize(path) for path in args.trace_dirs]
    keys = list(dict.fromkeys(k for _, figures in summaries for k in figures))
    print("| figure (p50 / p90) | " + " | ".join(f"{p.name} ({n})" for p, (n, _) in zip(args.trace_dirs, summaries)) + " |")
    print("|---|" + "---|" * len(summaries))
    for key in keys:
        cells = [f"{f[key][0]:.1f} / {f[key][1]:.1f}" if key in f else "-" for _, f in summaries]
        print(f"| {key} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
