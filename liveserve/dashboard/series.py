"""The last few minutes of a few figures, sampled together, for the dashboard's charts."""

from __future__ import annotations

from collections import deque


class SeriesLog:
    """The latest `capacity` samples, numbered from 1; each holds a time and figures by name (None: no value).

    `since(number)` gives the samples after `number`, column by column, so a page that has seen sample
    `number` fetches only what is new (a number from before the log's oldest sample gives all it holds).
    """

    def __init__(self, capacity: int) -> None:
        self.samples: deque[tuple[int, float, dict[str, float | None]]] = deque(maxlen=capacity)
        self.num_samples = 0

    def append(self, at: float, figures: dict[str, float | None]) -> None:
        self.num_samples += 1
        self.samples.append((self.num_samples, at, figures))

    def since(self, number: int) -> dict:
        """{"seq": the newest sample's number, "t": times, "columns": {name: values}} of the samples after `number`."""
        newer = [sample for sample in self.samples if sample[0] > number]
        names = sorted({name for _, _, figures in newer for name in figures})
        return {"seq": self.num_samples, "t": [round(at, 3) for _, at, _ in newer],
                "columns": {name: [figures.get(name) for _, _, figures in newer] for name in names}}
