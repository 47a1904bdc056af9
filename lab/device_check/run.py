"""The device check: its sections in order, each within its share of the budget, and the report of what ran."""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from lab.device_check import claim, engine, kv_tier, parity
from lab.device_check.deadline import Deadline
from lab.device_check.report import write_report
from lab.device_check.sections import Section, run_sections

SHARES = {"parity": (30.0, 90.0), "engine": (60.0, 150.0), "kv_tier": (20.0, 60.0), "claim": (90.0, None)}
"""Each section's (min_s, cap_s): it starts only with min_s left, and runs at most cap_s (None: all that is left)."""


@dataclass(frozen=True)
class CheckPlan:
    """Each section's plan: ON_GPU's sizes for an H200, DRY_RUN's tiny ones on the CPU."""

    dry_run: bool
    parity: parity.ParityPlan
    engine: engine.EnginePlan
    kv_tier: kv_tier.KVTierPlan
    claim: claim.ClaimPlan


ON_GPU = CheckPlan(False, parity.ON_GPU, engine.ON_GPU, kv_tier.ON_GPU, claim.ON_GPU)
DRY_RUN = CheckPlan(True, parity.DRY_RUN, engine.DRY_RUN, kv_tier.DRY_RUN, claim.DRY_RUN)


def sections(plan: CheckPlan, out: Path, only: tuple[str, ...] = tuple(SHARES)) -> list[Section]:
    """The sections named in `only`, in the check's order."""
    runs = {"parity": lambda deadline: parity.run_parity(plan.parity, deadline),
            "engine": lambda deadline: engine.run_engine(plan.engine, deadline),
            "kv_tier": lambda deadline: kv_tier.run_kv_tier(plan.kv_tier, deadline),
            "claim": lambda deadline: claim.run_claim(plan.claim, deadline, out)}
    return [Section(name, runs[name], *SHARES[name]) for name in SHARES if name in only]


def run_check(plan: CheckPlan, out: Path, budget_s: float, only: tuple[str, ...] = tuple(SHARES)) -> dict:
    """Run the sections named in `only` (every one by default) and return the result (each section with `dry_run`
    in a dry run); OUT/device_check.json and .md are written after each section, so that a run stopped later leaves
    what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report = {"device": describe_device(plan.dry_run),
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "seconds": 0.0, "budget_s": budget_s}

    def done(name: str, result: dict) -> None:
        print(f"{name}: {result['status']} ({result.get('seconds', 0):.0f} s){_why(result)}", file=sys.stderr,
              flush=True)
        if plan.dry_run:
            result["dry_run"] = True
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # what the section held, for the next (the claim's servers are other processes)
        report[name], report["seconds"] = result, round(time.monotonic() - started, 1)
        write_report(report, out)

    run_sections(sections(plan, out, only), Deadline(budget_s), done)
    return report


def describe_device(dry_run: bool) -> dict:
    """What ran: the GPU (or the CPU of a dry run) and the versions that matter."""
    name = "cpu (dry run)" if dry_run else torch.cuda.get_device_name()
    return {"name": name, "torch": torch.__version__, "cuda": torch.version.cuda, "triton": _version("triton"),
            "python": platform.python_version(), "cpus": os.cpu_count()}


def _version(module: str) -> str | None:
    try:
        return importlib.import_module(module).__version__
    except ImportError:
        return None


def _why(result: dict) -> str:
    return f": {result['reason']}" if "reason" in result else ""
