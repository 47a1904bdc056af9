"""Frozen admission settings (built by liveserve.config.loader from the `admission:` section)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from liveserve.admission.registry import ADMISSION_GATES
from stages.validation import require_number, require_positive_ints


@dataclass(frozen=True)
class AdmissionConfig:
    """How many full-duplex streams are let in, and the window of the KV saturation forecast.

    `policy` fixed admits up to server.max_sessions. `policy` aimd (the default) starts its cap at
    `initial_cap` and every `interval_s` raises it by one while the p99 per-frame
    latency of the last `latency_window_s` (null: `interval_s`) is at most `target` x
    the frame budget and live streams are at the cap or one below it, or drops it to
    max(`min_cap`, floor(live x `decrease_factor`)) when the p99 is over in
    `decrease_after` judgments in a row, each on frames newer than the last; every
    change waits for a whole window of frames at the new load before the next. The cap
    never exceeds server.max_sessions. After a decrease, raising the cap back to the
    live count that was too much waits `probe_wait_s` of good frames, twice that after
    each such probe fails (null: one window, like any increase).
    `forecast_window_s`: how much occupancy history the fill-rate fit uses.
    """

    policy: str = "aimd"
    initial_cap: int = 4
    min_cap: int = 1
    target: float = 0.45
    decrease_factor: float = 0.9
    decrease_after: int = 2
    interval_s: float = 1.0
    latency_window_s: float | None = 2.0
    probe_wait_s: float | None = 20.0
    forecast_window_s: float = 10.0

    def __post_init__(self) -> None:
        ADMISSION_GATES.check(self.policy)
        require_positive_ints(self, "initial_cap", "min_cap", "decrease_after")
        if self.initial_cap < self.min_cap:
            raise ValueError(f"initial_cap ({self.initial_cap}) must be at least min_cap ({self.min_cap})")
        require_number(self, "target", lambda v: 0 < v <= 1, "a number in (0, 1] (a fraction of the frame budget)")
        require_number(self, "decrease_factor", lambda v: 0 < v < 1, "a number in (0, 1)")
        for name in ("interval_s", "forecast_window_s"):
            require_number(self, name, lambda v: 0 < v < math.inf, "a finite number of seconds > 0")
        if self.latency_window_s is not None:
            require_number(self, "latency_window_s", lambda v: self.interval_s <= v < math.inf,
                           f"null or a finite number of seconds >= interval_s ({self.interval_s})")
        if self.probe_wait_s is not None:
            require_number(self, "probe_wait_s", lambda v: self.window_s <= v < math.inf,
                           f"null or a finite number of seconds >= the latency window ({self.window_s})")

    @property
    def window_s(self) -> float:
        return self.interval_s if self.latency_window_s is None else self.latency_window_s
