"""sim_fit_cpu's drift fit: the slow share and correlation time of step residuals, recovered from a known machine."""

import numpy as np
import pytest
from sim_fit_cpu import fit_drift

from lab.sim.step_noise import MachineNoise, StepJitter


def residuals_of(jitter: StepJitter, starts: np.ndarray, seed: str) -> np.ndarray:
    noise = MachineNoise(jitter, seed)
    return np.log([noise.factor(t) for t in starts])


@pytest.mark.parametrize("share, slow_s", [(0.5, 1.3), (0.25, 3.0)])
def test_the_drift_of_a_known_machine_is_recovered_from_its_steps(share, slow_s):
    rng = np.random.default_rng(3)
    runs, starts, residuals = [], [], []
    for run in range(2):  # two traces; steps 4-40 ms apart, as a loaded stage's
        times = np.cumsum(rng.uniform(0.004, 0.04, 12_000))
        runs.append(np.full(len(times), run))
        starts.append(times)
        residuals.append(residuals_of(StepJitter(0.4, share, slow_s), times, f"run-{run}"))
    fitted_share, fitted_s = fit_drift(np.concatenate(starts), np.concatenate(residuals), np.concatenate(runs))
    assert fitted_share == pytest.approx(share, abs=0.08)
    assert fitted_s == pytest.approx(slow_s, rel=0.35)


def test_independent_steps_have_no_drift():
    times = np.cumsum(np.random.default_rng(4).uniform(0.01, 0.04, 8_000))
    share, _ = fit_drift(times, residuals_of(StepJitter(0.4), times, "x"), np.zeros(len(times)))
    assert share < 0.03
