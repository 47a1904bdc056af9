"""`liveserve plan` on every shipped config, and one clear line (exit 2) for each plan that cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from liveserve.cli import main
from liveserve.config import deployment
from liveserve.config.loader import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
VOICE_H200, TINY_H200 = str(CONFIGS / "voice-h200.yaml"), str(CONFIGS / "tiny-omni-h200.yaml")


def liveserve(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda path: path.stem)
def test_every_shipped_config_prints_a_plan(capsys, config):
    status, out, err = liveserve(capsys, "plan", "--config", str(config))
    assert status == 0, err
    loaded = load_config(config)
    rows = [line.split()[0] for line in out.splitlines()[2:] if not line.startswith("GPU ")]
    assert rows == [f"{d.stage}[{replica}]" for d in loaded.deployments for replica in range(d.replicas)]
    gpu_lines = [line for line in out.splitlines() if line.startswith("GPU ")]
    assert len(gpu_lines) == loaded.runtime.node.num_gpus


def test_the_voice_node_puts_four_llm_replicas_on_gpu_pairs(capsys):
    _, out, _ = liveserve(capsys, "plan", "--config", VOICE_H200)
    thinker = [line.split() for line in out.splitlines() if line.startswith("thinker[")]
    assert [row[2] for row in thinker] == ["0,1", "2,3", "4,5", "6,7"]
    # budget 0.9 x 141 GB; weights 72.7 B x 2 bytes / 2 GPUs; vLLM's KV what they leave: 330,768 tokens x 160 KiB
    assert thinker[0][4:13] == ["126.9", "GB", "72.7", "GB", "54.2", "GB", "0.0", "GB", "330,768"]


def test_the_tiny_omni_node_shares_each_gpu_between_one_replica_of_every_stage(capsys):
    _, out, _ = liveserve(capsys, "plan", "--config", TINY_H200)
    assert "GPU 5: encoder[5] 2.8 GB, thinker[5] 14.1 GB, talker[5] 7.0 GB, vocoder[5] 2.8 GB" in out.splitlines()


@pytest.mark.parametrize("argv, line", [
    ((TINY_H200, "--gpus", "4x141GB"), "stages.encoder.devices: GPU 4 is not on the node, which has 4 (0-3)"),
    ((VOICE_H200, "--set", "stages.thinker.memory_fraction=0.5"),
     "stages.thinker.devices: replica 0's weights take 72.7 GB a GPU, over its 70.5 GB (memory_fraction 0.5 of a "
     "GPU); give each replica more GPUs"),
    ((TINY_H200, "--set", "stages.vocoder.memory_fraction=null"),
     "stages.vocoder.memory_fraction: GPU 0 is shared by encoder[0] and thinker[0] and talker[0] and vocoder[0]: "
     "give each of their stages a memory_fraction (together at most 1)"),
    ((TINY_H200, "--set", "stages.thinker.memory_fraction=0.95"),
     "stages.vocoder.memory_fraction: GPU 0 is shared by encoder[0] and thinker[0] and talker[0] and vocoder[0], "
     "whose memory fractions add up to 1.04, over 1"),
    ((VOICE_H200, "--set", "stages.thinker.replicas=5"),
     "stages.thinker.devices: 5 replicas x 2 GPUs need 10 GPUs; 8 of the node's 8 (0-7) are not taken"),
    ((VOICE_H200, "--set", "stages.thinker.tensor_parallel_size=4"),
     "stages.thinker: tensor_parallel_size 4 must equal each replica's GPUs (2, from devices): tensor "
     "parallelism spans a replica"),
    ((VOICE_H200, "--set", "stages.asr.devices=1"),
     "stages.asr.devices: this build runs asr on the CPU (its model library from its package); it takes no GPUs"),
    ((VOICE_H200, "--gpus", "8xH200"), "--gpus: expected COUNTxSIZEGB, e.g. 8x141GB, got '8xH200'"),
])
def test_a_plan_that_cannot_run_is_one_line_naming_the_field(capsys, argv, line):
    config, *rest = argv
    status, out, err = liveserve(capsys, "plan", "--config", config, *rest)
    assert (status, out, err) == (2, "", f"error: {line}\n")


def test_gpu_keys_need_devices_and_gpus_their_format(tmp_path, capsys):
    status, _, err = liveserve(capsys, "plan", "--config", "tiny-omni-cpu", "--set", "stages.thinker.dtype=float16")
    assert status == 2 and err.startswith("error: stages.thinker.dtype: applies to a stage on GPUs (set devices)")
    status, _, err = liveserve(capsys, "plan", "--config", "tiny-omni-cpu", "--set", "runtime.gpus=eight")
    assert (status, err) == (2, "error: runtime: gpus must be COUNTxSIZEGB, e.g. 8x141GB, got 'eight'\n")


NATIVE_ON_GPUS = ("native engines compute on CUDA GPUs, and this machine has none (remove devices to compute on "
                  "the CPU; `liveserve plan` plans such a config)")


@pytest.mark.parametrize("argv, line", [
    (("serve", "--config", TINY_H200), f"stages.encoder.devices: {NATIVE_ON_GPUS}"),
    (("run", "--config", "tiny-omni-cpu", "--text", "hi", "--out", "reply.wav", "--set", "stages.thinker.devices=1",
      "--set", "runtime.gpus=8x141GB"), f"stages.thinker.devices: {NATIVE_ON_GPUS}"),
    (("serve", "--config", VOICE_H200, "--set", "runtime.gpus=null"),
     "runtime.gpus: stages.thinker.devices places replicas on GPUs; give the node's GPUs (e.g. 8x141GB), which "
     "devices numbers"),
    (("serve", "--config", VOICE_H200, "--set", "runtime.gpus=4x141GB"),
     "stages.thinker.devices: 4 replicas x 2 GPUs need 8 GPUs; 4 of the node's 4 (0-3) are not taken"),
])
def test_serving_refuses_what_this_build_only_plans(capsys, argv, line, monkeypatch):
    monkeypatch.setattr(deployment, "cuda_present", lambda: False)  # as on a machine without a GPU
    assert liveserve(capsys, *argv) == (2, "", f"error: {line}\n")


def test_serving_a_vllm_stage_on_gpus_gets_past_its_devices_to_the_model_folder(capsys):
    status, _, err = liveserve(capsys, "serve", "--config", VOICE_H200)  # the folder is the deployer's
    assert status == 2 and err.startswith("error: model.thinker.folder: no folder at")
