"""Model runners: turn a scheduler plan into results."""

from __future__ import annotations

from abc import ABC, abstractmethod

from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests.base import StageRequest


class ModelRunner(ABC):
    """Executes one plan on a model.

    Contract: `execute` reads the planned requests (inputs, positions, KV block
    tables) but never mutates them or the scheduler; it writes KV for the planned
    positions and returns, per request id, the result its request's `advance`
    accepts (None where nothing was sampled). Plans are never empty.
    """

    @abstractmethod
    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        """Run the plan's chunks as one batch."""

    def attach(self, request: StageRequest) -> None:
        """`request` joined the stage, before any input of it was applied: give it what it takes of the
        runner (a thinker request: the stage's ConstraintCompiler). The default gives nothing."""
