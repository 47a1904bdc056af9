"""Frozen configuration the stage engine takes (built by `liveserve` from YAML)."""

from __future__ import annotations

from dataclasses import dataclass

from stages.validation import require_positive_ints


@dataclass(frozen=True)
class SchedulerConfig:
    """Per-round budgets of one stage's scheduler and the ordering policy's name."""

    policy: str = "fcfs"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512

    def __post_init__(self) -> None:
        from stages.policies import policy_names

        require_positive_ints(self, "max_num_seqs", "max_num_batched_tokens")
        if self.policy not in policy_names():
            raise ValueError(f"unknown scheduling policy {self.policy!r}; choose from {policy_names()}")


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
