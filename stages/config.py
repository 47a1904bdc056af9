"""Frozen configuration the stage engine takes (built by `liveserve` from YAML)."""

from __future__ import annotations

from dataclasses import dataclass

from stages.validation import require_positive_ints


@dataclass(frozen=True)
class SchedulerConfig:
    """Per-round budgets of one stage's scheduler, the name of the policy that orders its requests and
    that policy's parameters.

    `params` is an instance of the params class the policy is registered with (see
    `stages.policies`: UrgencyParams for `urgency`, the empty FCFSParams for `fcfs`);
    None: the policy's defaults. The name and the class are checked where the policy
    is made (`make_policy`), and in YAML when the config is read.
    """

    policy: str = "fcfs"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512
    params: object | None = None

    def __post_init__(self) -> None:
        require_positive_ints(self, "max_num_seqs", "max_num_batched_tokens")


HISTORIES = ("ssm",)


@dataclass(frozen=True)
class WindowSpec:
    """A bounded attention window: a query at position t attends to positions [0, sinks) and
    [t - tokens, t]; KV between the sinks and the window is freed (positions keep counting).

    `history` "ssm" gives every layer a history branch (stages/models/history.py): a fixed state per
    request that absorbs each position as it leaves the window and that every query reads; None: none.
    """

    tokens: int
    sinks: int = 0
    history: str | None = None

    def __post_init__(self) -> None:
        require_positive_ints(self, "tokens")
        if isinstance(self.sinks, bool) or not isinstance(self.sinks, int) or self.sinks < 0:
            raise ValueError(f"sinks must be an integer >= 0, got {self.sinks!r}")
        if self.history is not None and self.history not in HISTORIES:
            raise ValueError(f"history must be one of {', '.join(HISTORIES)} or null, got {self.history!r}")


@dataclass(frozen=True)
class SamplingParams:
    """How one generation draws tokens. temperature 0 is greedy; top_k 0 keeps all. `repetition_penalty`
    (1: none) divides the positive logits and multiplies the negative ones of the tokens this generation
    already drew (as transformers applies it), where the stage's runner applies one (Qwen3-Omni's talker)."""

    temperature: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    ignore_eos: bool = False
    seed: int = 0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.temperature, (int, float)) or not 0.0 <= self.temperature <= 5.0:
            raise ValueError(f"temperature must be a number in [0, 5], got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative integer, got {self.top_k!r}")
        require_positive_ints(self, "max_tokens")
        if not isinstance(self.repetition_penalty, (int, float)) or not 0.0 < self.repetition_penalty <= 10.0:
            raise ValueError(f"repetition_penalty must be a number in (0, 10], got {self.repetition_penalty!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1
