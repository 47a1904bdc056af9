"""Tool call constraints inside vLLM's sampler (imported in a stage process that has vLLM): a v1 custom logits
processor that masks each constrained request's row by a ToolCallMatcher of its own, as the native thinker
masks its rows (stages/grammar). Why not vLLM's structured outputs: docs/vllm-backend.md, "Tool calls"."""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from stages.grammar import ConstraintCompiler, ToolCallMatcher, masked_logits
from stages.vllm_backend.vllm_api import CONSTRAINT_ARG


class FollowedMatcher:
    """A generation's matcher and vLLM's list of its output tokens (vLLM appends each accepted token to it):
    `caught_up` has the matcher take the tokens appended since it last looked."""

    def __init__(self, matcher: ToolCallMatcher, output_ids: list[int]) -> None:
        self.matcher, self.output_ids = matcher, output_ids
        self.num_followed = 0

    def caught_up(self) -> ToolCallMatcher:
        for token_id in self.output_ids[self.num_followed:]:
            self.matcher.accept(token_id)
        self.num_followed = len(self.output_ids)
        return self.matcher


class ToolCallLogits(LogitsProcessor):
    """Masks the logits row of every request whose `SamplingParams.extra_args[CONSTRAINT_ARG]` is (a
    ToolCallConstraint, the generation's stop ids), by a matcher `compiler` (set on the class `for_compiler`
    makes) builds when vLLM adds the request to its batch; requests without it are left as they are. Before
    each mask the matcher takes the tokens vLLM appended to the request's outputs, so it follows what vLLM
    accepted; a preempted request comes back to the batch with all its outputs, and a new matcher takes them
    all. One row a request: vLLM's rejection sampler does not apply custom processors to draft tokens
    (vllm/v1/sample/rejection_sampler.py:350), so an engine with speculative decoding must not use this."""

    compiler: ConstraintCompiler

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, FollowedMatcher] = {}  # batch row -> its request's matcher

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.rows, batch_update, self._follow)

    def _follow(self, params, prompt_ids: list[int] | None, output_ids: list[int]) -> FollowedMatcher | None:
        constrained = (params.extra_args or {}).get(CONSTRAINT_ARG)
        return None if constrained is None else FollowedMatcher(self.compiler.matcher(*constrained), output_ids)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        matchers: list[ToolCallMatcher | None] = [None] * logits.shape[0]
        for row, followed in self.rows.items():
            matchers[row] = followed.caught_up()
        return masked_logits(logits, matchers)


def for_compiler(compiler: ConstraintCompiler) -> type[ToolCallLogits]:
    """ToolCallLogits over `compiler`, for `EngineArgs.logits_processors` (a class built here, not importable by
    name: the uni-process executor only, whose worker is the stage's process)."""
    return type("ToolCallLogits", (ToolCallLogits,), {"compiler": compiler})
