"""Section `parity`: the same greedy turn with the native stages on the device and on the CPU.

tiny-omni (tiny-omni-cpu, placement threads, the typed turn "hello") in float32 must give the same text token ids
and audio within a tolerance; with its thinker and talker in a low precision it is compared the same way, as
agreement (the first token that differs), not as a failure; then a tiny Qwen3-Omni folder (written by
lab.qwen3_omni.tiny_folder, seeded) in float32, as tiny-omni.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.device_check.deadline import Deadline
from lab.device_check.sections import Section, Skipped, run_section
from liveserve.config.document import Override
from liveserve.config.loader import LAB_CONFIG, LiveServeConfig, load_config
from liveserve.one_turn import TurnResult, run_one_turn
from orchestrator.session.events import TurnRequest
from stages.kinds import StageKind
from stages.stage_spec import PACKAGED

TEXT = "hello"
TURN_TIMEOUT_S = 120.0
GREEDY = ("runtime.placement=threads", "stages.thinker.sampling.temperature=0", "stages.talker.sampling.temperature=0")
QWEN3_OMNI_CONFIG = "qwen3-omni-tiny-cpu"  # greedy as shipped


@dataclass(frozen=True)
class ParityPlan:
    """`device`: where the compared turns compute (a dry run: "cpu", compared with itself). `audio_tolerance`: the
    largest difference of a sample (in [-1, 1]) of equal audio. `low_precision`: the thinker's and talker's dtype in
    the agreement run (None: not run). `qwen3_omni_shape`: the tiny folder's shape (None: not run). A part starts
    only if `part_min_s` is left."""

    device: str
    max_tokens: int
    audio_tolerance: float
    low_precision: str | None
    qwen3_omni_shape: str | None
    part_min_s: float


ON_GPU = ParityPlan("cuda", 16, 1e-2, "bfloat16", "tiny-a", 20.0)
DRY_RUN = ParityPlan("cpu", 8, 1e-2, "bfloat16", "tiny-a", 1.0)  # bf16 on the CPU: the GPU path's dtypes


def run_parity(plan: ParityPlan, deadline: Deadline) -> dict:
    config = load_config(LAB_CONFIG, [Override.parse(text) for text in GREEDY])
    reference = one_turn(config, plan.max_tokens)
    float32 = compare(reference, one_turn(on_device(config, plan.device), plan.max_tokens), plan.audio_tolerance)
    return {"config": LAB_CONFIG, "text": TEXT, "max_tokens": plan.max_tokens, "device": plan.device,
            "audio_tolerance": plan.audio_tolerance, "equal": float32["equal"], "float32": float32,
            "low_precision": run_section(Section("low_precision", lambda _: low_precision(plan, config, reference),
                                                 plan.part_min_s), deadline),
            "qwen3_omni": run_section(Section("qwen3_omni", lambda _: qwen3_omni(plan), plan.part_min_s), deadline)}


def low_precision(plan: ParityPlan, config: LiveServeConfig, reference: TurnResult) -> dict:
    if plan.low_precision is None:
        raise Skipped("not planned")
    dtypes = {StageKind.THINKER: plan.low_precision, StageKind.TALKER: plan.low_precision}
    other = one_turn(on_device(config, plan.device, dtypes), plan.max_tokens)
    return {"dtype": plan.low_precision, **compare(reference, other, plan.audio_tolerance)}


def qwen3_omni(plan: ParityPlan) -> dict:
    """The tiny folder's turn on the CPU and on the device, both float32."""
    from transformers.utils import logging

    from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder

    if plan.qwen3_omni_shape is None:
        raise Skipped("not planned")
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_tiny_folder(Path(scratch) / "qwen3-omni", SHAPES[plan.qwen3_omni_shape], seed=0)
        sets = (f"model.folder={folder}", "runtime.placement=threads")
        config = load_config(QWEN3_OMNI_CONFIG, [Override.parse(text) for text in sets])
        reference = one_turn(config, plan.max_tokens)
        other = one_turn(on_device(config, plan.device), plan.max_tokens)
    return {"config": QWEN3_OMNI_CONFIG, "shape": plan.qwen3_omni_shape,
            **compare(reference, other, plan.audio_tolerance)}


def on_device(config: LiveServeConfig, device: str, dtypes: dict[str, str] | None = None) -> LiveServeConfig:
    """`config` with every native stage (but the CPU-only packaged ones) on `device`, in float32 or its `dtypes`."""
    pipeline = config.pipeline
    moved = {kind.value: dataclasses.replace(spec, device=device, dtype=(dtypes or {}).get(kind, "float32"))
             for kind in StageKind if (spec := getattr(pipeline, kind)) is not None
             and spec.backend == "native" and kind not in PACKAGED}
    return dataclasses.replace(config, pipeline=dataclasses.replace(pipeline, **moved))


def one_turn(config: LiveServeConfig, max_tokens: int) -> TurnResult:
    """The turn's result; RuntimeError if it failed, TimeoutError if it took over TURN_TIMEOUT_S."""
    turn = run_one_turn(config, None, TEXT, TurnRequest(max_tokens=max_tokens))
    result = asyncio.run(asyncio.wait_for(turn, TURN_TIMEOUT_S))
    if result.error is not None:
        raise RuntimeError(f"the turn ended {result.status}: {result.error}")
    return result


def compare(reference: TurnResult, other: TurnResult, audio_tolerance: float) -> dict:
    """How `other` agrees with `reference`: the first text token that differs (None: all equal), each one's audio
    samples, their largest sample difference (None where the lengths differ), and whether they are equal."""
    diverged = first_difference(reference.text_token_ids, other.text_token_ids)
    lengths = [len(reference.audio), len(other.audio)]
    diff = None
    if lengths[0] == lengths[1]:
        diff = float(np.abs(reference.audio - other.audio).max()) if lengths[0] else 0.0
    figures = {"turn_status": other.status, "text_tokens": len(other.text_token_ids), "tokens_equal": diverged is None,
               "first_divergent_token": diverged, "audio_samples": lengths, "audio_max_abs_diff": diff,
               "equal": diverged is None and diff is not None and diff <= audio_tolerance}
    if diverged is not None:
        figures["token_ids"] = {"reference": list(reference.text_token_ids), "device": list(other.text_token_ids)}
    return figures


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """The first index where `a` and `b` differ (one ending first counts); None if they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
