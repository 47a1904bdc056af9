"""Admission policies chosen by name (`admission.policy`): "fixed", "aimd"."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from liveserve.admission.config import AdmissionConfig
    from liveserve.admission.gate import AdmissionGate

GateFactory = Callable[["AdmissionConfig", float, int], "AdmissionGate"]


def _fixed(config: AdmissionConfig, frame_budget_s: float, max_cap: int) -> AdmissionGate:
    from liveserve.admission.gate import FixedAdmission

    return FixedAdmission(max_cap)


def _aimd(config: AdmissionConfig, frame_budget_s: float, max_cap: int) -> AdmissionGate:
    from liveserve.admission.aimd import AIMDAdmission

    return AIMDAdmission(config, frame_budget_s, max_cap)


_REGISTRY: dict[str, GateFactory] = {"fixed": _fixed, "aimd": _aimd}


def admission_policy_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def make_admission(config: AdmissionConfig, frame_budget_s: float, max_cap: int) -> AdmissionGate:
    """The gate `config.policy` names, for frames of `frame_budget_s` and at most `max_cap` sessions."""
    return _REGISTRY[config.policy](config, frame_budget_s, max_cap)
