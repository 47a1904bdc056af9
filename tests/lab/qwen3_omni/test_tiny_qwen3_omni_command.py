"""`liveserve tiny-qwen3-omni DIR [--shape NAME] [--seed N]`: one line naming the folder, or one naming the bad
argument with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab.qwen3_omni.command import main


def test_the_installed_command_writes_a_folder_and_names_it(tmp_path):
    liveserve = Path(sys.executable).parent / "liveserve"
    result = subprocess.run([str(liveserve), "tiny-qwen3-omni", str(tmp_path / "tiny"), "--shape", "tiny-b",
                             "--seed", "7"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"wrote Qwen3-Omni tiny-b (seed 7) to {tmp_path / 'tiny'}"]
    assert (tmp_path / "tiny" / "model.safetensors.index.json").is_file()


def test_an_unknown_shape_is_named(tmp_path, capsys):
    assert main([str(tmp_path / "tiny"), "--shape", "huge"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --shape: unknown shape 'huge' (known: tiny-a, tiny-b, tiny-c, tiny-d)"]
    assert not (tmp_path / "tiny").exists()


def test_a_folder_with_files_in_it_is_not_written_over(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: DIR: {tmp_path} exists and is not an empty folder"]
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]
