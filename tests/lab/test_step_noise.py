"""The simulated machine's step noise: a seeded function of virtual time with the fitted spread and drift."""

import math

import numpy as np
import pytest

from lab.sim.step_noise import SLOT_S, MachineNoise, StepJitter


def log_factors(jitter: StepJitter, times, seed: str = "thinker") -> np.ndarray:
    noise = MachineNoise(jitter, seed)
    return np.log([noise.factor(t) for t in times])


def test_without_jitter_every_factor_is_one():
    assert MachineNoise(StepJitter(), "x").factor(3.0) == 1.0


def test_one_seed_gives_one_machine_whichever_times_are_asked():
    jitter = StepJitter(0.4, 0.5, 1.0)
    every = MachineNoise(jitter, "thinker")
    factors = {t: every.factor(t) for t in (0.001, 0.0125, 0.5, 1.2, 7.0)}
    sparse = MachineNoise(jitter, "thinker")
    assert [sparse.factor(t) for t in (0.5, 7.0)] == [factors[0.5], factors[7.0]]
    assert MachineNoise(jitter, "talker").factor(7.0) != factors[7.0]
    assert every.factor(7.0 + SLOT_S / 4) == factors[7.0]  # within a slot, one draw


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_the_factor_keeps_the_price_as_its_mean_and_sigma_as_its_spread(share):
    times = np.arange(40_000) * SLOT_S * 10
    logs = log_factors(StepJitter(0.3, share, 0.2), times)
    assert np.mean(np.exp(logs)) == pytest.approx(1.0, abs=0.02)
    assert np.std(logs) == pytest.approx(0.3, rel=0.06)


def test_the_slow_share_correlates_over_its_time_and_the_rest_does_not():
    slow_s, share = 0.5, 0.6
    times = (np.arange(200_000) + 0.5) * SLOT_S  # slot by slot
    logs = log_factors(StepJitter(0.3, share, slow_s), times)

    def correlation(lag_s: float) -> float:
        ahead = round(lag_s / SLOT_S)
        return float(np.corrcoef(logs[:-ahead], logs[ahead:])[0, 1])
    assert correlation(SLOT_S) == pytest.approx(share * math.exp(-SLOT_S / slow_s), abs=0.02)
    assert correlation(slow_s) == pytest.approx(share * math.exp(-1), abs=0.04)
    assert abs(correlation(10 * slow_s)) < 0.04
    fast = log_factors(StepJitter(0.3), times)
    assert abs(np.corrcoef(fast[:-1], fast[1:])[0, 1]) < 0.02  # without a slow share, slot by slot anew


def test_wrong_knobs_are_named():
    with pytest.raises(ValueError, match="step_jitter_slow_share"):
        StepJitter(0.3, 1.5)
    with pytest.raises(ValueError, match="step_jitter_slow_s"):
        StepJitter(0.3, 0.5, 0.0)
    with pytest.raises(ValueError, match="step_jitter must"):
        StepJitter(-0.1)
