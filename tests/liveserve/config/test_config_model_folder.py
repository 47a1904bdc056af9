"""A thinker on vLLM from a Hugging Face folder the deployer has on disk (`model.thinker.folder`): voice-h200
loads and plans without it; a hub id is refused; a folder here is checked when the config is read, one to come
when serving starts (check_checkpoints); every mistake is one line naming the field."""

from __future__ import annotations

import json
import shutil
import sys
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from liveserve.config.loader import check_checkpoints, load_config
from liveserve.config.reader import ConfigError
from stages.factory import thinker_text

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
VOICE_H200 = CONFIGS / "voice-h200.yaml"
CHATML = ("{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\nBe brief."
          "<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(autouse=True)
def vllm_python(monkeypatch):
    monkeypatch.setenv("LIVESERVE_VLLM_PYTHON", sys.executable)  # a checkout without .venv-vllm


def h200_with(tmp_path, edit) -> Path:
    data = yaml.safe_load(VOICE_H200.read_text())
    edit(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def folder_at(value):
    return lambda data: data["model"]["thinker"].update(folder=str(value))


def thinker_shape() -> dict:
    shape = dict(yaml.safe_load(VOICE_H200.read_text())["model"]["thinker"])
    del shape["folder"]
    return shape


def model_folder(tmp_path, **config_changes) -> Path:
    """A folder shaped as voice-h200's thinker: its config.json, a weights file, the tiny tokenizer, a ChatML template."""
    folder = tmp_path / "Qwen2.5-72B-Instruct"
    folder.mkdir()
    shape = thinker_shape()
    config = {"vocab_size": shape["vocab_size"], "hidden_size": shape["hidden_size"],
              "num_hidden_layers": shape["num_layers"], "num_attention_heads": shape["num_heads"],
              "num_key_value_heads": shape["num_kv_heads"], "intermediate_size": shape["intermediate_size"]}
    (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    (folder / "model.safetensors").write_bytes(b"")  # vLLM reads it; the checks only look for it
    shutil.copy(str(files("stages.models") / "assets" / "tiny_bpe.json"), folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    return folder


def test_the_h200_voice_config_runs_its_llm_on_vllm_over_gpu_pairs_without_the_folder_here():
    thinker = load_config(VOICE_H200).pipeline.thinker
    assert (thinker.backend, thinker.kv, thinker.gguf, thinker.folder) == (
        "vllm", None, None, Path("/models/Qwen2.5-72B-Instruct"))
    args = thinker.vllm
    assert (args.dtype, args.tensor_parallel_size, args.gpu_memory_utilization, args.kv_cache_mib) == (
        "bfloat16", 2, 0.9, None)


def test_a_model_hub_id_is_refused_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_config(h200_with(tmp_path, folder_at("Qwen/Qwen2.5-72B-Instruct")))
    assert str(refused.value) == (
        "model.thinker.folder: 'Qwen/Qwen2.5-72B-Instruct' is not a folder on this machine (a model hub id?); "
        "LiveServe downloads nothing: download the weights first and give their folder's absolute path")


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp, "has no config.json (not a Hugging Face model folder)"),
    (lambda tmp: model_folder(tmp, num_hidden_layers=64), "config.json has num_hidden_layers 64, the config's "
     "model.thinker.num_layers is 80"),
])
def test_a_folder_on_this_machine_is_checked_when_the_config_is_read(tmp_path, make, message):
    with pytest.raises(ConfigError) as refused:
        load_config(h200_with(tmp_path, folder_at(make(tmp_path))))
    assert str(refused.value).startswith("model.thinker.folder: ") and message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_folder_to_come_is_checked_before_serving_starts(tmp_path):
    missing = tmp_path / "not-yet"
    config = load_config(h200_with(tmp_path, folder_at(missing)))  # `plan` goes on: the shape is declared
    with pytest.raises(ConfigError) as refused:
        check_checkpoints(config)
    assert str(refused.value).startswith(f"model.thinker.folder: no folder at {missing} (the deployer puts")


@pytest.mark.parametrize("damage, message", [
    (lambda folder: (folder / "model.safetensors").unlink(), "has no *.safetensors weights"),
    (lambda folder: (folder / "tokenizer.json").unlink(), "tokenizer file not found"),
    (lambda folder: (folder / "tokenizer_config.json").write_text("{}"), "no chat template"),
    (lambda folder: (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"})),
     "the chat template is not ChatML"),
])
def test_what_the_server_reads_from_a_folder_is_checked_before_serving_starts(tmp_path, damage, message):
    folder = model_folder(tmp_path)
    config = load_config(h200_with(tmp_path, folder_at(folder)))
    check_checkpoints(config)  # whole: no error
    damage(folder)
    with pytest.raises(ConfigError, match=r"^model\.thinker\.folder: ") as refused:
        check_checkpoints(config)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_the_server_tokenizes_with_the_folders_tokenizer_and_its_default_system_message(tmp_path):
    config = load_config(h200_with(tmp_path, folder_at(model_folder(tmp_path))))
    tokenizer, instructions = thinker_text(config.pipeline.thinker)
    assert instructions == "Be brief."
    assert tokenizer.decode(tokenizer.encode("Hello there")) == "Hello there"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["stages"]["thinker"]["vllm"].update(dtype="float16"),
     "stages.thinker.vllm.dtype: on GPUs vLLM takes the stage's dtype (as the plan does); leave it out"),
    (lambda d: d["stages"]["thinker"]["vllm"].update(kv_cache_mib=1024),
     "stages.thinker.vllm.kv_cache_mib: on GPUs vLLM takes what memory_fraction leaves (as the plan does)"),
    (lambda d: d["stages"]["thinker"].pop("memory_fraction"),
     "stages.thinker.memory_fraction: required for vllm on GPUs: vLLM takes that share of each of its GPUs"),
    (lambda d: d["stages"]["thinker"]["vllm"].update(tensor_parallel_size=2),
     "stages.thinker.vllm.tensor_parallel_size: unknown field"),
    (lambda d: d["stages"]["thinker"].update(dtype="float8"), "stages.thinker.vllm: dtype must be one of "
     "('bfloat16', 'float16', 'float32') (on GPUs)"),
    (lambda d: d["stages"]["thinker"]["vllm"].update(block_size=8), "stages.thinker.vllm: block_size must be a "
     "multiple of 16 (on GPUs)"),
    (lambda d: d["stages"]["thinker"].update(backend="native", kv={"num_blocks": 64}),
     "stages.thinker.vllm: vllm arguments need backend: vllm"),
    (lambda d: (d["stages"]["thinker"].update(backend="native", kv={"num_blocks": 64}),
                d["stages"]["thinker"].pop("vllm")),
     "stages.thinker: folder: stage thinker's Hugging Face folder is loaded by vLLM; set its backend: vllm"),
])
def test_gpu_engine_arguments_come_from_the_deployment_and_mistakes_name_the_field(tmp_path, edit, message):
    with pytest.raises(ConfigError) as refused:
        load_config(h200_with(tmp_path, edit))
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
