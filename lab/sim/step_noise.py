"""The simulated machine's speed over virtual time: the spread every step of a stage is priced with."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

SLOT_S = 0.005  # the fast part is drawn anew every 5 ms of virtual time


@dataclass(frozen=True)
class StepJitter:
    """How a stage's steps spread around their price: a step starting at t takes its price times
    exp(X(t) - sigma^2 / 2), X a stationary Gaussian process of standard deviation `sigma` (the spec's
    `step_jitter`: the standard deviation of log(measured / fitted) over real steps). `slow_share` of its
    variance drifts with correlation time `slow_s` (an Ornstein-Uhlenbeck process: the machine's load, the
    other processes on its cores); the rest is drawn anew every SLOT_S. A real server's step residuals are
    correlated so (benchmarks/sim_fit_cpu.py fits both knobs)."""

    sigma: float = 0.0
    slow_share: float = 0.0
    slow_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.sigma >= 0:
            raise ValueError(f"step_jitter must be >= 0, got {self.sigma!r}")
        if not 0 <= self.slow_share <= 1:
            raise ValueError(f"step_jitter_slow_share must be between 0 and 1, got {self.slow_share!r}")
        if not self.slow_s > 0:
            raise ValueError(f"step_jitter_slow_s must be > 0, got {self.slow_s!r}")


class MachineNoise:
    """A StepJitter's X as a function of virtual time, drawn from `seed` slot by slot in order: two runs
    with one seed see the same factor at the same time whatever steps they run, so policies compared on
    one spec meet the same machine (common random numbers), and only their own choices tell them apart."""

    def __init__(self, jitter: StepJitter, seed: str) -> None:
        self.jitter = jitter
        self._draws = random.Random(seed)
        self._decay = math.exp(-SLOT_S / jitter.slow_s)
        self._renewal = math.sqrt(1.0 - self._decay ** 2)
        self._slot, self._slow, self._fast = -1, self._draws.gauss(0.0, 1.0), 0.0

    def factor(self, t: float) -> float:
        """The step time's factor for a step starting at `t` (times at or after the last asked for)."""
        sigma = self.jitter.sigma
        if not sigma:
            return 1.0
        slot, draws = math.floor(t / SLOT_S), self._draws
        while self._slot < slot:
            self._slot += 1
            self._slow = self._decay * self._slow + self._renewal * draws.gauss(0.0, 1.0)
            self._fast = draws.gauss(0.0, 1.0)
        share = self.jitter.slow_share
        x = sigma * (math.sqrt(share) * self._slow + math.sqrt(1.0 - share) * self._fast)
        return math.exp(x - sigma * sigma / 2)
