"""What the dashboard costs the server: its process's CPU time, idle, with /dashboard open in headless Chromium
against without, and against a server whose dashboard is off.

    .venv/bin/python benchmarks/dashboard_cost.py                      # 60 s a phase, two rounds (~6 minutes)
    .venv/bin/python benchmarks/dashboard_cost.py --seconds 10 --rounds 1 --out /tmp/dashboard_cost.json

Phases, each `--seconds` long on an idle fresh server of the lab's config (tiny-omni-cpu) after a warm-up: `off`
(server.dashboard: false: no sampler, no routes), then each round `closed` (on, no page: the feed's 1 Hz sampler
alone) and `open` (the page open, polling the feed every second, its charts drawn). CPU is the server process's user
plus system time (psutil), not its stage processes' nor the browser's, as a share of one core. Also prints the
feed's size: the first answer (all the samples kept) and a later one (only the new samples).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
from pathlib import Path

import psutil

from lab.browser import HeadlessChromium, find_chromium
from lab.server_process import ServerProcess
from liveserve.config.document import Override
from liveserve.config.loader import LAB_CONFIG, lab_config_path

OUT = Path(__file__).resolve().parent / "results" / "dashboard_cost.json"
WARM_UP_S = 5.0


def cpu_seconds(server: ServerProcess) -> float:
    times = psutil.Process(server.proc.pid).cpu_times()
    return times.user + times.system


async def measure(server: ServerProcess, seconds: float) -> float:
    """The server's CPU share of one core over `seconds`."""
    before = cpu_seconds(server)
    await asyncio.sleep(seconds)
    return (cpu_seconds(server) - before) / seconds


async def phase(name: str, server: ServerProcess, seconds: float) -> dict:
    share = await measure(server, seconds)
    print(f"{name:>6}: {100 * share:.3f} % of a core over {seconds:g} s", flush=True)
    return {"phase": name, "seconds": seconds, "cpu_share": share}


async def with_page(chromium: str, server: ServerProcess, seconds: float) -> dict:
    async with HeadlessChromium(chromium) as browser:
        await browser.open(f"http://127.0.0.1:{server.port}/dashboard")
        await asyncio.sleep(2.0)  # the first feed (all samples) and the charts' first draw are not counted
        measured = await phase("open", server, seconds)
        measured["page_updates"] = await browser.evaluate("Number(document.body.dataset.updates)")
    return measured


def feed_sizes(server: ServerProcess) -> dict:
    first = server.get("/dashboard/feed")
    seq = json.loads(first)["series"]["seq"]
    return {"first_bytes": len(first), "later_bytes": len(server.get(f"/dashboard/feed?since={seq - 1}"))}


async def run(chromium: str, seconds: float, rounds: int) -> dict:
    phases = []
    with ServerProcess(lab_config_path(), [Override.parse("server.dashboard=false")]) as off:
        await asyncio.sleep(WARM_UP_S)
        phases.append(await phase("off", off, seconds))
    with ServerProcess(lab_config_path()) as on:
        await asyncio.sleep(WARM_UP_S)
        for _ in range(rounds):
            phases.append(await phase("closed", on, seconds))
            phases.append(await with_page(chromium, on, seconds))
        sizes = feed_sizes(on)
    mean = {name: statistics.mean(p["cpu_share"] for p in phases if p["phase"] == name)
            for name in ("off", "closed", "open")}
    summary = {**{f"{name}_share": share for name, share in mean.items()},
               "page_share": mean["open"] - mean["closed"], "dashboard_share": mean["open"] - mean["off"],
               "feed": sizes}
    return {"date": datetime.date.today().isoformat(), "config": LAB_CONFIG, "seconds": seconds,
            "rounds": rounds, "cpu": psutil.cpu_count(), "phases": phases, "summary": summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=2, help="closed/open pairs")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not args.seconds > 0 or args.rounds < 1:
        print("error: --seconds must be > 0 and --rounds >= 1", file=sys.stderr)
        return 2
    chromium = find_chromium()
    if chromium is None:
        print("error: no chromium on the PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    result = asyncio.run(run(chromium, args.seconds, args.rounds))
    summary = result["summary"]
    print(f"page open vs closed: {100 * summary['page_share']:+.3f} % of a core; open vs dashboard off: "
          f"{100 * summary['dashboard_share']:+.3f} %; feed {summary['feed']['first_bytes']} bytes first, "
          f"{summary['feed']['later_bytes']} bytes a second after")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
