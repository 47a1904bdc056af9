"""The `liveserve bench replay` command line: flags -> ReplayOptions, result -> summary and JSON."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from lab.replay.options import DATASETS, ReplayOptions
from lab.replay.presets import PRESETS
from lab.replay.report import report_path, write_replay_report
from lab.result_json import format_number, write_json
from lab.server_process import ServerStartError
from lab.speech import SpeechError
from liveserve.config.document import add_override_argument


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    server = parser.add_argument_group("server (a running one, or a fresh one per run)")
    server.add_argument("--url", help="realtime URL of a running server on loopback, e.g. ws://127.0.0.1:8000/v1/realtime")
    server.add_argument("--config", type=Path,
                        help="start a fresh server from this YAML (default: the lab's, tiny-omni-cpu)")
    server.add_argument("--policy", default="fcfs-nooffload", choices=list(PRESETS),
                        help="policy preset of that server")
    add_override_argument(server, "stages.thinker.kv.num_blocks=256, applied after the preset")
    server.add_argument("--simulate", metavar="SPEC",
                        help="simulate the server in virtual time on a shipped sim spec (e.g. qwen3-omni-1xh200) "
                             "or a spec file, instead of serving")
    server.add_argument("--machine-seed", type=int, default=0,
                        help="with --simulate: which draw of the spec's step noise the simulated machine has "
                             "(runs with one seed meet the same machine)")
    workload = parser.add_argument_group("workload")
    workload.add_argument("--dataset", default="random", choices=DATASETS)
    workload.add_argument("--dataset-path", type=Path, help="the dataset file, as published")
    workload.add_argument("--num-requests", type=int, default=200, help="requests (interactive: sessions)")
    workload.add_argument("--seed", type=int, default=0)
    workload.add_argument("--random-input-len", type=int, default=64, help="random dataset: prompt tokens")
    workload.add_argument("--random-output-len", type=int, default=32, help="random dataset: reply tokens")
    workload.add_argument("--random-range-ratio", type=float, default=0.0,
                          help="random dataset: lengths uniform within +- this fraction")
    workload.add_argument("--model-filter", help="burstgpt: keep rows of this Model only")
    workload.add_argument("--prompt-audio", action="store_true",
                          help="speak prompts (eSpeak NG, cached) instead of text")
    arrivals = parser.add_argument_group("arrivals")
    arrivals.add_argument("--request-rate", type=float, default=math.inf, help="requests per second (inf: all at once)")
    arrivals.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of inter-arrivals (1: Poisson)")
    arrivals.add_argument("--max-concurrency", type=int, help="sessions in flight at most")
    arrivals.add_argument("--hold-until-heard", action="store_true",
                          help="a session keeps its slot until its last reply has been played, not just received")
    arrivals.add_argument("--trace-arrivals", action="store_true", help="replay the trace's timestamps")
    arrivals.add_argument("--time-scale", type=float, default=1.0, help="trace time multiplier (0.5: twice as fast)")
    client = parser.add_argument_group("client")
    client.add_argument("--barge-in-prob", type=float, default=0.0,
                        help="probability that the user speaks over a reply")
    client.add_argument("--audio-ms-per-token", type=float, help="reply audio per text token (needed with --url)")
    client.add_argument("--request-timeout", type=float, default=600.0, help="seconds to wait for one reply")
    parser.add_argument("--result-json", type=Path,
                        help="write the result object here, and an HTML report beside it (.html)")


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    return ReplayOptions(
        dataset=args.dataset, dataset_path=args.dataset_path, num_requests=args.num_requests, seed=args.seed,
        random_input_len=args.random_input_len, random_output_len=args.random_output_len,
        random_range_ratio=args.random_range_ratio,
        request_rate=args.request_rate, burstiness=args.burstiness, max_concurrency=args.max_concurrency,
        hold_until_heard=args.hold_until_heard,
        trace_arrivals=args.trace_arrivals, time_scale=args.time_scale, model_filter=args.model_filter,
        prompt_audio=args.prompt_audio, barge_in_prob=args.barge_in_prob, url=args.url, config=args.config,
        policy=args.policy, overrides=tuple(args.overrides), request_timeout_s=args.request_timeout,
        audio_ms_per_token=args.audio_ms_per_token, simulate=args.simulate, machine_seed=args.machine_seed,
    )


def run_replay_command(args: argparse.Namespace) -> int:
    """Exit status: 0 when every request was served, 1 when some failed, 2 for a bad
    option, workload, preset or a server that would not start or serve (one line on stderr)."""
    from lab.replay.run import ServerUnavailable, run_replay
    from lab.sim.replay import run_simulated_replay

    try:
        options = options_from_args(args)
        result = (run_replay if options.simulate is None else run_simulated_replay)(options)
    except (ValueError, ServerStartError, ServerUnavailable, SpeechError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(result))
    if args.result_json is not None:
        write_json(args.result_json, result)
        write_replay_report(report_path(args.result_json), result)
        print(f"report written to {report_path(args.result_json)}", file=sys.stderr)
    return 0 if result["num_failed"] == 0 else 1


def format_summary(result: dict[str, Any]) -> str:
    """The headline figures, one per line, as `vllm bench serve` prints them."""
    rows = [
        ("Requests (completed / barged in / failed)",
         f"{result['num_completed']} / {result['num_cancelled']} / {result['num_failed']}"),
        ("Completed requests/s", format_number(result["completed_rps"], 3)),
    ]
    for key, label in (("audio_ttfp_ms", "Audio TTFP (ms)"), ("text_ttft_ms", "Text TTFT (ms)"),
                       ("audio_rtf", "Audio RTF"), ("e2e_ms", "E2E latency (ms)")):
        figures = result[key]
        digits = 3 if key == "audio_rtf" else 1
        rows.append((f"{label} mean / p50 / p90 / p99",
                     " / ".join(format_number(figures[p], digits) for p in ("mean", "p50", "p90", "p99"))))
    continuity = result["continuity"]
    rows.append(("Continuity ok (<= 100 ms)", format_number(result["continuity_ok_rate"], 3)))
    rows.append(("C50 / C100 / C200", " / ".join(format_number(continuity[c], 3) for c in ("c50", "c100", "c200"))))
    rows.append(("Wasted-token ratio", format_number(result["wasted_token_ratio"], 3)))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
