"""A run's sections, each within its share of the deadline; one failing or skipped does not stop the others."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass

from lab.device_check.deadline import Deadline


@dataclass(frozen=True)
class Section:
    """`run` measures within the deadline it is given (the run's, capped at `cap_s` from its start) and returns
    its figures. It starts only if `min_s` is left; it may skip parts of itself when the deadline is near."""

    name: str
    run: Callable[[Deadline], dict]
    min_s: float
    cap_s: float | None = None


def run_sections(sections: list[Section], deadline: Deadline,
                 on_done: Callable[[str, dict], None] = lambda name, result: None) -> dict[str, dict]:
    """Each section's result, in order: its figures with `status` "ran" and `seconds`; or "skipped" (too little
    time left, or it raised Skipped) or "failed" (what it raised: the traceback's last line, and the `traceback`)
    with a `reason`; `on_done` is told each as it ends."""
    results = {}
    for section in sections:
        results[section.name] = run_section(section, deadline)
        on_done(section.name, results[section.name])
    return results


class Skipped(Exception):
    """Raised by a section (or a part of one) that does not run here; the message says why."""


def run_section(section: Section, deadline: Deadline) -> dict:
    """One section's (or part's) result, as run_sections gives it."""
    if not deadline.allows(section.min_s):
        return {"status": "skipped", "reason": deadline.reason(section.name, section.min_s)}
    started = deadline.clock()
    try:
        figures = section.run(deadline.within(section.cap_s))
    except Skipped as skipped:
        return {"status": "skipped", "reason": str(skipped)}
    except Exception as exc:  # a section's failure is its result; the next section still runs
        return {"status": "failed", "reason": last_line(exc), "seconds": round(deadline.clock() - started, 1),
                "traceback": "".join(traceback.format_exception(exc))}
    return {"status": "ran", "seconds": round(deadline.clock() - started, 1), **figures}


def last_line(exc: BaseException) -> str:
    """The last line of the exception's traceback: its type and message (of a message of several lines, the first
    and the last: a server's start error ends with its own)."""
    lines = traceback.format_exception_only(exc)[-1].strip().splitlines()
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
