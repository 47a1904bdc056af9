"""Observations of the last minutes as bucket counts in time slices: a distribution that forgets."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence

QUANTILES = (0.5, 0.9, 0.99)


class RecentHistogram:
    """Counts of observations per bucket (upper bounds `buckets`, inclusive, then +Inf) in slices of
    `slice_s` seconds; slices older than `window_s` are forgotten. `summary(now)` gives the window's
    counts and its quantiles, interpolated within buckets as Prometheus' histogram_quantile does (one
    in the +Inf bucket is reported as the largest bound). Times are the caller's clock; not thread-safe.
    """

    def __init__(self, buckets: Sequence[float], window_s: float = 300.0, slice_s: float = 10.0) -> None:
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError(f"buckets must be increasing and not empty, got {buckets!r}")
        self.buckets, self.window_s, self.slice_s = tuple(buckets), window_s, slice_s
        self._slices: deque[tuple[int, list[int]]] = deque()  # (slice number, counts per bucket)

    def observe(self, value: float, now: float) -> None:
        number = int(now // self.slice_s)
        if not self._slices or self._slices[-1][0] != number:
            self._slices.append((number, [0] * (len(self.buckets) + 1)))
        self._slices[-1][1][bisect.bisect_left(self.buckets, value)] += 1
        self._forget(number)

    def counts(self, now: float) -> list[int]:
        """Observations per bucket over the window ending at `now`."""
        self._forget(int(now // self.slice_s))
        totals = [0] * (len(self.buckets) + 1)
        for _, counts in self._slices:
            for index, count in enumerate(counts):
                totals[index] += count
        return totals

    def summary(self, now: float) -> dict:
        """{"window_s", "le": bounds, "counts": per bucket (+Inf last), "count", "p50", "p90", "p99"} (None: none)."""
        counts = self.counts(now)
        quantiles = {f"p{round(q * 100)}": self.quantile(q, counts) for q in QUANTILES}
        return {"window_s": self.window_s, "le": list(self.buckets), "counts": counts, "count": sum(counts),
                **quantiles}

    def quantile(self, q: float, counts: list[int]) -> float | None:
        total = sum(counts)
        if not total:
            return None
        rank, below = q * total, 0
        for index, count in enumerate(counts):
            if count and below + count >= rank:
                if index == len(self.buckets):
                    return self.buckets[-1]
                lower = self.buckets[index - 1] if index else 0.0
                return lower + (self.buckets[index] - lower) * (rank - below) / count
            below += count
        return self.buckets[-1]

    def _forget(self, number: int) -> None:
        oldest = number - int(self.window_s // self.slice_s) + 1
        while self._slices and self._slices[0][0] < oldest:
            self._slices.popleft()
