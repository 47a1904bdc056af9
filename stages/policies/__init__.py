"""Scheduling policies chosen by name."""

from stages.policies.base import SchedulingPolicy, make_policy, policy_names, register_policy

__all__ = ["SchedulingPolicy", "make_policy", "policy_names", "register_policy"]
