"""Who gets in: admission gates on per-frame latency, and forecasts of when KV pools fill (pure Python)."""

from liveserve.admission.config import AdmissionConfig
from liveserve.admission.forecast import SaturationForecast
from liveserve.admission.gate import DECISIONS, Adjustment, AdmissionGate, FixedAdmission, make_admission
from liveserve.admission.kv_watch import KVWatch
from liveserve.admission.registry import ADMISSION_GATES

__all__ = ["ADMISSION_GATES", "DECISIONS", "AdmissionConfig", "AdmissionGate", "Adjustment", "FixedAdmission",
           "KVWatch", "SaturationForecast", "make_admission"]
