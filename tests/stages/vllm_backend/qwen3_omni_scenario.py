"""One Qwen3-Omni thinker session, the same on any thinker engine (native, or on vLLM in .venv-vllm): a text
turn, a spoken turn (given rows over its audio placeholders), a turn cut after its third token (a barge-in:
the context keeps what was heard) and a turn after it. What each turn gave the talker is recorded: its tokens,
the prompt rows of its first step, and each token's row."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from liveserve.config.document import override_argument
from liveserve.config.loader import load_config
from stages.commands import AddRequest, AppendInput, StopGeneration
from stages.config import SamplingParams
from stages.models.qwen3_omni.config import Qwen3OmniConfig
from stages.models.qwen3_omni.folder import Qwen3OmniFolder
from stages.requests.talker_context import TalkerContextRule
from stages.requests.thinker import ThinkerRequest, TurnInput
from stages.stage_spec import StageSpec

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
NUM_AUDIO = 20
CUT_AFTER = 3


def thinker_spec(config: str, folder) -> StageSpec:
    return load_config(config, [override_argument(f"model.folder={folder}")]).pipeline.thinker


def audio_rows(hidden_size: int) -> torch.Tensor:
    """Rows standing in for the audio tower's, drawn from a fixed seed."""
    return 0.05 * torch.randn(NUM_AUDIO, hidden_size, generator=torch.Generator().manual_seed(7))


def converse(folder, submit: Callable[[list], None], next_output: Callable[[], object]) -> dict[str, torch.Tensor]:
    config = Qwen3OmniConfig.from_folder(folder)
    tokenizer = Qwen3OmniFolder(folder).tokenizer()
    user = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    audio = "<|audio_start|>" + "<|audio_pad|>" * NUM_AUDIO + "<|audio_end|>"
    turns = [user.format("Hello there, who are you?"), "<|im_end|>\n" + user.format(audio),
             "<|im_end|>\n" + user.format("Tell me a story."), "<|im_end|>\n" + user.format("Sorry, go on.")]
    special = config.tokens
    rule = TalkerContextRule(special.im_start_token_id, special.user_token_id, special.assistant_token_id)
    submit([AddRequest(ThinkerRequest("s1", time.monotonic(), tokenizer.stop_ids, 4096, rule))])
    recorded, known = {}, 0
    for index, text in enumerate(turns):
        ids = tokenizer.encode(text)
        pad = tokenizer.audio_pad_id
        embeds = [(ids.index(pad), audio_rows(config.thinker.hidden_size))] if pad in ids else []
        submit([AppendInput("s1", TurnInput(ids, embeds, GREEDY, tag=index))])
        known += len(ids)
        steps = _steps(next_output, index, CUT_AFTER if index == 2 else None)
        if index == 2:
            known += CUT_AFTER
            submit([StopGeneration("s1", keep_tokens=known)])
        else:
            known += len(steps)
        first = steps[0].talker_prompt
        recorded |= {f"{index}.tokens": torch.tensor([s.token_id for s in steps]),
                     f"{index}.rows": torch.stack([s.hidden for s in steps]),
                     f"{index}.user_rows": first.user_rows, f"{index}.user_is_audio": first.user_is_audio,
                     f"{index}.header_rows": first.header_rows}
    return recorded


def _steps(next_output, tag: int, limit: int | None) -> list:
    """The steps of the generation tagged `tag` until it finishes (or `limit` of them), skipping earlier ones'."""
    steps = []
    while limit is None or len(steps) < limit:
        output = next_output()
        assert output.error is None, output.error
        if output.payload is None or output.payload.tag != tag:
            continue
        steps.append(output.payload)
        if output.payload.finish_reason is not None:
            break
    return steps
