"""When will a KV pool fill? A least-squares fill rate over a sliding window."""

from __future__ import annotations

import logging
from collections import deque
from typing import NamedTuple

log = logging.getLogger(__name__)


class Sample(NamedTuple):
    at: float
    session_s: float  # sessions integrated over time since the first sample
    occupancy: float
    num_sessions: int


class SaturationForecast:
    """Predicts when one KV pool fills from its occupancy over the last `window_s`.

    Each session is taken to fill the pool at r (occupancy per second per session).
    Occupancy is fitted against accumulated session-seconds (the session count
    integrated over time), so the least-squares slope is r even while sessions come
    and go; with the latest occupancy and N sessions, t_sat = (1 - occupancy) / (N x r).
    `fill_rate` is None with fewer than two samples spanning session-seconds;
    `time_to_saturation_s` is None also when r <= 0 (not filling) or N == 0.
    `is_warning` holds while t_sat < `expected_session_s`; each crossing into it
    logs one warning.
    """

    def __init__(self, name: str, window_s: float, expected_session_s: float) -> None:
        self.name, self.window_s, self.expected_session_s = name, window_s, expected_session_s
        self.samples: deque[Sample] = deque()
        self.fill_rate: float | None = None
        self.time_to_saturation_s: float | None = None
        self.is_warning = False

    @property
    def occupancy(self) -> float:
        return self.samples[-1].occupancy if self.samples else 0.0

    def add(self, now: float, occupancy: float, num_sessions: int) -> None:
        """One sample of the pool at `now`: its occupancy (0-1) and the sessions it serves."""
        session_s = 0.0
        if self.samples:
            last = self.samples[-1]
            session_s = last.session_s + last.num_sessions * (now - last.at)
        self.samples.append(Sample(now, session_s, occupancy, num_sessions))
        while self.samples[0].at < now - self.window_s:
            self.samples.popleft()
        self.fill_rate = _slope([s.session_s for s in self.samples], [s.occupancy for s in self.samples])
        self.time_to_saturation_s = self._time_to_saturation(occupancy, num_sessions)
        self._update_warning()

    def _time_to_saturation(self, occupancy: float, num_sessions: int) -> float | None:
        if self.fill_rate is None or self.fill_rate <= 0 or num_sessions == 0:
            return None
        return max(0.0, 1.0 - occupancy) / (num_sessions * self.fill_rate)

    def _update_warning(self) -> None:
        was_warning = self.is_warning
        self.is_warning = self.time_to_saturation_s is not None and self.time_to_saturation_s < self.expected_session_s
        if self.is_warning and not was_warning:
            log.warning("KV pool of %s predicted full in %.0f s (occupancy %.0f%%, %d sessions each filling %.3g%%/s), "
                        "sooner than the expected session time of %.0f s", self.name, self.time_to_saturation_s,
                        100 * self.occupancy, self.samples[-1].num_sessions, 100 * self.fill_rate,
                        self.expected_session_s)


def _slope(xs: list[float], ys: list[float]) -> float | None:
    """The least-squares slope of ys over xs; None when the xs do not spread."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread
