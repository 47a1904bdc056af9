"""The dependency rules of ARCHITECTURE.md, enforced by import-linter contracts in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 kept, 0 broken" in result.stdout
    assert "Serving never imports the lab (benchmarks, the Realtime client, the simulator) KEPT" in result.stdout


def test_the_lab_contract_is_one_package_level_rule_over_every_serving_package():
    """The lab rule names whole packages, so a new serving module is covered without editing it."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    lab = [c for c in contracts if c.get("forbidden_modules") == ["lab"]]
    assert [c["source_modules"] for c in lab] == [["liveserve", "orchestrator", "stages", "monitor", "kvtier"]]
