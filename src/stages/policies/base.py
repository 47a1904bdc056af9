"""Scheduling policies: the order in which a stage serves ready requests."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from stages.requests.base import StageRequest


class SchedulingPolicy(ABC):
    """Orders requests for one scheduling round.

    Contract: `order` returns the same requests, most urgent first, without mutating
    them; it must be cheap (called every round). The scheduler admits in this order
    and preempts from the end of it.
    """

    @abstractmethod
    def order(self, requests: Sequence[StageRequest], now: float) -> list[StageRequest]:
        """Requests sorted most urgent first."""


_REGISTRY: dict[str, Callable[[], SchedulingPolicy]] = {}


def register_policy(name: str) -> Callable:
    def wrap(factory: Callable[[], SchedulingPolicy]) -> Callable[[], SchedulingPolicy]:
        _REGISTRY[name] = factory
        return factory

    return wrap


def make_policy(name: str) -> SchedulingPolicy:
    from stages.policies import fcfs  # noqa: F401  (registers itself)

    if name not in _REGISTRY:
        raise ValueError(f"unknown scheduling policy {name!r}; choose from {sorted(_REGISTRY)}")
    return _REGISTRY[name]()


def policy_names() -> list[str]:
    from stages.policies import fcfs  # noqa: F401

    return sorted(_REGISTRY)
