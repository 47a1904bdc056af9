"""Small helpers shared by the realtime tests."""

from __future__ import annotations

import numpy as np


def silence(ms: int) -> np.ndarray:
    return np.zeros(24 * ms, "<i2")
