"""Admission policies chosen by name (`admission.policy`): "fixed", "aimd"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtier.registry import Registry

if TYPE_CHECKING:
    from liveserve.admission.config import AdmissionConfig
    from liveserve.admission.gate import AdmissionGate

ADMISSION_GATES: Registry[AdmissionGate] = Registry("admission policy")  # factories: (config, frame_budget_s, max_cap)
ADMISSION_GATES.add("fixed", "liveserve.admission.gate:FixedAdmission.from_config")
ADMISSION_GATES.add("aimd", "liveserve.admission.aimd:AIMDAdmission")


def make_admission(config: AdmissionConfig, frame_budget_s: float, max_cap: int) -> AdmissionGate:
    """The gate `config.policy` names, for frames of `frame_budget_s` and at most `max_cap` sessions."""
    return ADMISSION_GATES.make(config.policy, config, frame_budget_s, max_cap)
