"""OUT/device_check.json (the whole result) and OUT/device_check.md (a table per section).

The JSON: `device` {name ("cpu (dry run)" in a dry run), torch, cuda, triton, python, cpus}, `started` (UTC, ISO),
`seconds`, `budget_s`, and a result per section (`parity`, `engine`, `kv_tier`, `claim`): `status` "ran",
"skipped" or "failed", `seconds` (not when skipped), `reason` (not when ran; failed: the traceback's last line, the
whole in `traceback`), `dry_run` true in a dry run, and when ran its figures (each section's module says them).
Parts of a section (parity's `low_precision` and `qwen3_omni`, kv_tier's `overlap`) are results of the same shape.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.result_json import json_safe

SECTIONS = ("parity", "engine", "kv_tier", "claim")
UNFINISHED = {"status": "skipped", "reason": "not finished when this report was written"}


def write_report(report: dict, out: Path) -> None:
    """The report as JSON and markdown; a section it has not yet is written as UNFINISHED."""
    report = {**report, **{name: report.get(name, UNFINISHED) for name in SECTIONS}}
    (out / "device_check.json").write_text(json.dumps(json_safe(report), indent=2, allow_nan=False) + "\n")
    (out / "device_check.md").write_text(markdown(report))


def markdown(report: dict) -> str:
    device = report["device"]
    lines = [f"# Device check: {device['name']}", "",
             f"torch {device['torch']} (CUDA {device['cuda']}), triton {device['triton']}, Python {device['python']}, "
             f"{device['cpus']} CPUs; started {report['started']}, {report['seconds']} s of a {report['budget_s']} s "
             "budget.", "", *table(["section", "status", "seconds", "reason"],
                                   [[name, report[name]["status"], report[name].get("seconds"),
                                     report[name].get("reason", "")] for name in SECTIONS])]
    for name in SECTIONS:
        lines += ["", f"## {name}", ""]
        result = report[name]
        lines += WRITERS[name](result) if result["status"] == "ran" else [f"{result['status']}: {result['reason']}"]
    return "\n".join(lines) + "\n"


def parity_tables(result: dict) -> list[str]:
    low = result["low_precision"]
    parts = [("tiny-omni float32", {"status": "ran", **result["float32"]}),
             (f"tiny-omni thinker and talker {low.get('dtype', 'in low precision')}", low),
             ("Qwen3-Omni tiny float32", result["qwen3_omni"])]
    header = ["turn vs CPU", "status", "tokens equal", "first divergent", "audio samples", "max abs diff", "equal"]
    return [f"Greedy turn {result['text']!r} on {result['device']}; audio tolerance {result['audio_tolerance']}.", "",
            *table(header, [[label, part["status"], *_agreement(part)] for label, part in parts])]


def _agreement(part: dict) -> list:
    if "tokens_equal" not in part:
        return [part.get("reason", ""), "", "", "", ""]
    return [part["tokens_equal"], part["first_divergent_token"], part["audio_samples"], part["audio_max_abs_diff"],
            part["equal"]]


def engine_tables(result: dict) -> list[str]:
    header = ["rates", "depth", "batch", "prefill tok/s", "roofline", "/roofline", "simulated", "/simulated",
              "decode tok/s", "roofline", "/roofline", "simulated", "/simulated"]
    keys = [f"{prefix}{phase}{suffix}" for phase in ("prefill", "decode") for prefix, suffix in
            (("", "_tok_s"), ("roofline_", "_tok_s"), ("", "_over_roofline"), ("simulated_", "_tok_s"),
             ("", "_over_simulated"))]
    rows = [[kind, row["depth"], row["batch"], *(row[key] for key in keys)]
            for kind, rows in (("measured", result["measured"]), ("full depth", result["full_depth_estimate"]))
            for row in rows]
    return [f"{result['model']}, {result['dtype']} on {result['device']}: {result['depths']} layers measured, the "
            f"full {result['full_depth']} estimated from them. Roofline: {result['roofline_device']}. Simulated: "
            f"{result['simulated_device']}.", "", *table(header, rows),
            *(f"skipped: {reason}" for reason in result["skipped"])]


def kv_tier_tables(result: dict) -> list[str]:
    lines = [f"Block: {result['block']} ({result['bytes_per_block']} bytes), host pinned: {result['pinned_host']}; "
             f"the simulator's link: {result['simulated_link_gbytes_s']} GB/s.", "",
             *table(["blocks", "MB", "store GB/s", "load GB/s"],
                    [[row["blocks"], row["mbytes"], row["store_gbytes_s"], row["load_gbytes_s"]]
                     for row in result["bandwidth"]]), ""]
    overlap = result["overlap"]
    if overlap["status"] != "ran":
        return lines + [f"overlap {overlap['status']}: {overlap['reason']}"]
    keys = ["steps", "load_blocks", "steps_alone_s", "steps_during_load_s", "step_slowdown", "load_alone_s",
            "load_during_steps_s", "load_finished", "load_covers_steps", "overlaps"]
    return lines + [f"Overlap: {overlap['engine']}.", "", *table(keys, [[overlap[key] for key in keys]])]


def claim_tables(result: dict) -> list[str]:
    keys = ["preset", "users", "requests", "p50_ttfp_ms", "p90_ttfp_ms", "continuity_ok_rate", "wasted_token_ratio",
            "num_failed", "seconds"]
    runs = [("unloaded", result["unloaded"]), *((f"ramp {i + 1}", run) for i, run in enumerate(result["ramp"])),
            ("shipped", result["shipped"])]
    reached = "reached" if result["reached_slowdown"] else "not reached"
    return [f"Workload: {result['workload']}. Target P90 TTFP {result['target_p90_ttfp_ms']} ms ({reached}); "
            f"shipped / FCFS P90 at equal load: {result['p90_ttfp_ratio']}.", "",
            *table(["run", *keys], [[label, *(run[key] for key in keys)] for label, run in runs]),
            *(f"skipped: {reason}" for reason in result["skipped"])]


WRITERS = {"parity": parity_tables, "engine": engine_tables, "kv_tier": kv_tier_tables, "claim": claim_tables}


def table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(value) for value in row) + " |" for row in rows)]


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return " ".join(str(value).split()).replace("|", "\\|")
