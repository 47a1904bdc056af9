"""ShareGPT conversations, sampled and filtered exactly as vLLM's serving benchmark does.

Formats, as published:
- ShareGPT_V3 (`ShareGPT_V3_unfiltered_cleaned_split.json`): one JSON array
  `[{"id": str, "conversations": [{"from": "human"|"gpt"|..., "value": str}, ...]}, ...]`.
- ShareGPT Chinese-English 90K (`sharegpt_jsonl/*.jsonl`): one JSON object per line,
  `{"conversation_id": str|int, "category": str, "conversation": [{"human": str, "assistant": str}, ...]}`.

Sampling follows vLLM's `ShareGPTDataset` and `is_valid_sequence` as on main in late
2025 (vllm/benchmarks/datasets.py and dataset_utils.py, behind `vllm bench serve`;
the thresholds are those of the older `sample_sharegpt_requests` in
benchmarks/benchmark_serving.py): conversations with fewer than 2 turns are dropped,
the rest shuffled with `random.Random(seed)` (the same permutation as vLLM's
`random.seed(seed); random.shuffle`), then walked in order, keeping a conversation
unless prompt < 4 tokens, response < 4 tokens, prompt > 1024 tokens or prompt +
response > 2048 tokens, until `num_requests` are kept (all valid ones when None).
Unlike vLLM, an entry without "conversations" is an error, not silently dropped, and
fewer valid conversations than `num_requests` are not oversampled.

Prompt = the first human turn; response length = the tokens of the gpt turn right
after it (vLLM takes turns 0 and 1 whatever their roles; the two agree whenever a
conversation opens with human then gpt). A conversation with no such pair is
skipped. Token counts are `len(tokenizer.encode_literal(text))`, how the server
encodes user text (vLLM counts with the model's tokenizer, with any BOS it adds).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import NamedTuple

from lab.workloads.request import (
    WorkloadRequest,
    id_field,
    json_array,
    json_object,
    jsonl_records,
    member,
    read_json,
    text_field,
)
from stages.models.tokenizer import TextTokenizer

MIN_TOKENS = 4
MAX_PROMPT_TOKENS = 1024
MAX_TOTAL_TOKENS = 2048


class Exchange(NamedTuple):
    """A conversation's first prompt and the reply to it."""

    conversation_id: str
    prompt: str
    reply: str


def load_sharegpt(
    path: str | Path, tokenizer: TextTokenizer, *, num_requests: int | None = None, seed: int = 0
) -> list[WorkloadRequest]:
    """Sample requests from a ShareGPT_V3 JSON array (read whole with `json.load`)."""
    path = Path(path)
    entries = json_array(read_json(path), path.name)
    candidates = []
    for index, entry in enumerate(entries):
        where = f"{path.name}[{index}]"
        turns = json_array(member(json_object(entry, where), where, "conversations"), f"{where}.conversations")
        if len(turns) >= 2:
            candidates.append(_first_exchange(entry, turns, where))
    return _sample(candidates, tokenizer, num_requests, seed)


def load_sharegpt_zh_en(
    path: str | Path, tokenizer: TextTokenizer, *, num_requests: int | None = None, seed: int = 0
) -> list[WorkloadRequest]:
    """Sample requests from a ShareGPT Chinese-English 90K JSONL file, read line by line.

    One human/assistant pair is two turns, so "fewer than 2 turns" means no pair.
    """
    candidates = []
    for where, record in jsonl_records(Path(path)):
        pairs = json_array(member(record, where, "conversation"), f"{where}: conversation")
        if pairs:
            pair_where = f"{where}: conversation[0]"
            pair = json_object(pairs[0], pair_where)
            candidates.append(
                Exchange(
                    id_field(record, where, "conversation_id"),
                    text_field(pair, pair_where, "human"),
                    text_field(pair, pair_where, "assistant"),
                )
            )
    return _sample(candidates, tokenizer, num_requests, seed)


def is_valid_sequence(prompt_tokens: int, response_tokens: int) -> bool:
    """vLLM's length filter with its defaults."""
    return (
        prompt_tokens >= MIN_TOKENS
        and response_tokens >= MIN_TOKENS
        and prompt_tokens <= MAX_PROMPT_TOKENS
        and prompt_tokens + response_tokens <= MAX_TOTAL_TOKENS
    )


def _first_exchange(entry: dict, turns: list, where: str) -> Exchange | None:
    """The first human turn and the gpt turn right after it; None if there is none.

    Turns are validated up to the one read, so errors do not depend on the seed.
    """
    for index, turn in enumerate(turns[:-1]):
        turn_where = f"{where}.conversations[{index}]"
        if text_field(json_object(turn, turn_where), turn_where, "from") == "human":
            prompt = text_field(turn, turn_where, "value")
            reply_where = f"{where}.conversations[{index + 1}]"
            reply = json_object(turns[index + 1], reply_where)
            if text_field(reply, reply_where, "from") != "gpt":
                return None
            return Exchange(id_field(entry, where, "id"), prompt, text_field(reply, reply_where, "value"))
    return None


def _sample(
    candidates: list[Exchange | None], tokenizer: TextTokenizer, num_requests: int | None, seed: int
) -> list[WorkloadRequest]:
    if num_requests is not None and num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    random.Random(seed).shuffle(candidates)
    requests: list[WorkloadRequest] = []
    for exchange in candidates:
        if num_requests is not None and len(requests) >= num_requests:
            break
        if exchange is None:
            continue
        prompt_tokens = len(tokenizer.encode_literal(exchange.prompt))
        response_tokens = len(tokenizer.encode_literal(exchange.reply))
        if is_valid_sequence(prompt_tokens, response_tokens):
            requests.append(WorkloadRequest(exchange.conversation_id, exchange.prompt, prompt_tokens, response_tokens))
    return requests
