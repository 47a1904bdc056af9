"""Admission policies chosen by name (`admission.policy`): "fixed", "aimd" (gates made by `make_admission`)."""

from __future__ import annotations

from kvtier.registry import Registry

ADMISSION_GATES: Registry = Registry("admission policy")  # factories: (config, frame_budget_s, max_cap) -> AdmissionGate
ADMISSION_GATES.add("fixed", "liveserve.admission.gate:FixedAdmission.from_config")
ADMISSION_GATES.add("aimd", "liveserve.admission.aimd:AIMDAdmission")
