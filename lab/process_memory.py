"""Resident memory of a server and its stage processes, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path

STAGE_PREFIX = "ls-"  # what a stage process calls itself (orchestrator.placement.stage_process.PROCESS_PREFIX)
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mb(pid: int) -> float | None:
    """Resident set size of `pid` in MB; None if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_MB
    except (OSError, IndexError, ValueError):
        return None


def stage_processes(root: int) -> dict[str, int]:
    """The stage processes among `root`'s descendants: name (ls-<stage>) -> pid."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        names[int(entry.name)] = name
        children.setdefault(int(rest[1]), []).append(int(entry.name))
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if names[pid].startswith(STAGE_PREFIX):
            found[names[pid]] = pid
        todo += children.get(pid, [])
    return found


def server_rss_mb(server_pid: int) -> dict[str, float]:
    """MB resident in the server process ("server") and in each of its stage processes, now."""
    processes = {"server": server_pid, **stage_processes(server_pid)}
    return {name: mb for name, pid in processes.items() if (mb := rss_mb(pid)) is not None}
