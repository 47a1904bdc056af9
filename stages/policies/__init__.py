"""Scheduling policies chosen by name."""

from stages.policies.base import SCHEDULING_POLICIES, SchedulingPolicy, make_policy

__all__ = ["SCHEDULING_POLICIES", "SchedulingPolicy", "make_policy"]
