"""Frozen configuration the stage engine takes (built by `liveserve` from YAML)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from stages.validation import require_number, require_positive_ints


@dataclass(frozen=True)
class SchedulerConfig:
    """Per-round budgets of one stage's scheduler, the ordering policy's name and its knobs.

    The `urgency` policy reads the rest (`fcfs` ignores them): playback buffers at or
    below `p_safe_ms` are at risk; at or above `p_yield_ms` (may be .inf: never) the
    request is held while a listener waits for first audio or is at risk at any stage
    on the same device; at or above `p_max_ms` (may be .inf: never) it is held until
    playback brings it down to `p_resume_ms` (None: back under `p_max_ms`; a lower mark
    paces in bursts, leaving a held context idle long enough to leave the device);
    `alpha` weighs barge-in exposure and `beta` KV-pressure relief in the utility that
    orders the remaining requests.
    """

    policy: str = "fcfs"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512
    p_safe_ms: float = 400.0
    p_max_ms: float = 2000.0
    p_yield_ms: float = 1000.0
    p_resume_ms: float | None = None
    alpha: float = 1.0
    beta: float = 0.25

    def __post_init__(self) -> None:
        from stages.policies import SCHEDULING_POLICIES

        require_positive_ints(self, "max_num_seqs", "max_num_batched_tokens")
        require_number(self, "p_safe_ms", lambda v: 0 < v < math.inf, "a finite number > 0")
        for name in ("p_max_ms", "p_yield_ms"):
            require_number(self, name, lambda v: v > self.p_safe_ms, f"a number > p_safe_ms ({self.p_safe_ms})")
        if self.p_resume_ms is not None:
            require_number(self, "p_resume_ms", lambda v: self.p_safe_ms < v < self.p_max_ms,
                           f"a number between p_safe_ms ({self.p_safe_ms}) and p_max_ms ({self.p_max_ms}), or null")
        for name in ("alpha", "beta"):
            require_number(self, name, lambda v: 0 <= v < math.inf, "a finite number >= 0")
        SCHEDULING_POLICIES.check(self.policy)


@dataclass(frozen=True)
class WindowSpec:
    """A bounded attention window: a query at position t attends to positions [0, sinks) and
    [t - tokens, t]; KV between the sinks and the window is freed (positions keep counting)."""

    tokens: int
    sinks: int = 0

    def __post_init__(self) -> None:
        require_positive_ints(self, "tokens")
        if isinstance(self.sinks, bool) or not isinstance(self.sinks, int) or self.sinks < 0:
            raise ValueError(f"sinks must be an integer >= 0, got {self.sinks!r}")


@dataclass(frozen=True)
class SamplingParams:
    """How one generation draws tokens. temperature 0 is greedy; top_k 0 keeps all."""

    temperature: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    ignore_eos: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.temperature, (int, float)) or not 0.0 <= self.temperature <= 5.0:
            raise ValueError(f"temperature must be a number in [0, 5], got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative integer, got {self.top_k!r}")
        require_positive_ints(self, "max_tokens")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1
