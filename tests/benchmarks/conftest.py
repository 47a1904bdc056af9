"""Benchmark helpers live in benchmarks/ (scripts, not a package): make them importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
