"""Ray placement's scenarios (ray_scenarios.py), run in a network namespace of their own with only loopback
up, so that nothing Ray starts can reach or be reached from another machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = Path(__file__).with_name("ray_scenarios.py").relative_to(ROOT)
IN_LOOPBACK_NAMESPACE = ["unshare", "--user", "--map-root-user", "--net", "sh", "-c",
                         'ip link set lo up && exec "$@"', "sh"]


def namespaces_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run([*IN_LOOPBACK_NAMESPACE, "true"], capture_output=True).returncode == 0


@pytest.mark.slow
def test_ray_placement_scenarios_in_a_loopback_only_network_namespace():
    pytest.importorskip("ray")
    if not namespaces_available():
        pytest.skip("cannot make a network namespace here (unshare --net, ip): the Ray tests run only inside one")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(SCENARIOS)]
    result = subprocess.run([*IN_LOOPBACK_NAMESPACE, *command], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "4 passed" in result.stdout
