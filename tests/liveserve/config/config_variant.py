"""The lab's default YAML config (tiny-omni) with edits, written where a test can load it."""

from __future__ import annotations

from pathlib import Path

import yaml

from liveserve.config.loader import lab_config_path


def write_variant(tmp_path: Path, edit) -> Path:
    """`edit(data)` changes the parsed lab config (tiny-omni-cpu) in place; returns the written file."""
    data = yaml.safe_load(lab_config_path().read_text())
    edit(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
