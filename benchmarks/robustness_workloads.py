"""A robustness scenario's sample, written in its source's published format, and the KV pools it fits in.

- ShareGPT: conversations of ShareGPT_V3 (benchmarks/prepare_sharegpt.py) drawn at random by the grid's seed
  (`sharegpt_pool`: other conversations than the project's fixed traces, which take seed 7's first 96), kept
  where vLLM's length filter keeps them; a scenario takes those inside its length mix, written as a ShareGPT_V3
  JSON array of their first human/gpt exchange.
- BurstGPT: a CSV with BurstGPT's published columns, lengths log-uniform inside the mix (the timestamps are
  written but the grid's arrivals are its own).
- interactive: sessions of the scenario's turns as benchmarks/make_interactive_trace.py writes them (prompt and
  reply lengths uniform inside the mix, gaps of 1-4 s after hearing the reply).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from make_interactive_trace import session_rows
from robustness_scenarios import Scenario

from lab.workloads.sharegpt import is_valid_sequence
from stages.models.tokenizer import TextTokenizer

SHAREGPT_PATH = Path(__file__).resolve().parent / "data" / "ShareGPT_V3_prefix.json"
POOL_SIZE = 8000  # conversations drawn, before vLLM's filter
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
GAP_S = (1.0, 4.0)
SERVED_BLOCKS = 2048  # tiny-omni-cpu's thinker and talker pools as served: "fits" is never below them
BLOCK_SIZE = 16
SPOKEN_POSITIONS_PER_TOKEN = 4  # encoder frames (12.5 Hz) of a prompt spoken by eSpeak NG at 175 words/min
TURN_MARGIN = 64  # positions a turn adds besides prompt and reply (template, the barge-in clip's speech)
TALKER_FRAMES_PER_TOKEN = 3
FITS_MARGIN = 1.25


@dataclass(frozen=True)
class Exchange:
    """A ShareGPT conversation reduced to its first exchange (`entry`, in the published format) and its lengths."""

    entry: dict
    prompt_tokens: int
    reply_tokens: int


@dataclass(frozen=True)
class Workload:
    """A scenario's sample file and each session's (prompt, reply) tokens, turn by turn."""

    path: Path
    sessions: list[list[tuple[int, int]]]

    @property
    def num_requests(self) -> int:
        return sum(len(turns) for turns in self.sessions)


def sharegpt_pool(seed: int, path: Path = SHAREGPT_PATH, size: int = POOL_SIZE) -> list[Exchange]:
    """`size` conversations of the ShareGPT_V3 file drawn by `seed`, those vLLM's length filter keeps."""
    entries = json.loads(path.read_text(encoding="utf-8"))
    tokenizer = TextTokenizer.default()
    pool = []
    for index in random.Random(seed).sample(range(len(entries)), min(size, len(entries))):
        turns = entries[index].get("conversations") or []
        if len(turns) < 2 or turns[0].get("from") != "human" or turns[1].get("from") != "gpt":
            continue
        prompt, reply = (len(tokenizer.encode_literal(turn["value"])) for turn in turns[:2])
        if is_valid_sequence(prompt, reply):
            pool.append(Exchange({"id": entries[index]["id"], "conversations": turns[:2]}, prompt, reply))
    return pool


def write_workload(scenario: Scenario, directory: Path, pool: list[Exchange]) -> Workload:
    """The scenario's sample in `directory` (sample.json, .csv or .jsonl)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(scenario.seed)
    if scenario.source == "sharegpt":
        return _write_sharegpt(scenario, rng, pool, directory / "sample.json")
    if scenario.source == "burstgpt":
        return _write_burstgpt(scenario, rng, directory / "sample.csv")
    return _write_interactive(scenario, directory / "sample.jsonl")


def _write_sharegpt(scenario: Scenario, rng: np.random.Generator, pool: list[Exchange], path: Path) -> Workload:
    inside = [e for e in pool if _within(e.prompt_tokens, scenario.prompt_tokens)
              and _within(e.reply_tokens, scenario.reply_tokens)]
    if not inside:
        raise ValueError(f"scenario {scenario.index}: no ShareGPT conversation within its length mix")
    chosen = [inside[i] for i in rng.permutation(len(inside))[:scenario.num_requests]]
    path.write_text(json.dumps([e.entry for e in chosen], ensure_ascii=False), encoding="utf-8")
    return Workload(path, [[(e.prompt_tokens, e.reply_tokens)] for e in chosen])


def _write_burstgpt(scenario: Scenario, rng: np.random.Generator, path: Path) -> Workload:
    prompts, replies = (_log_uniform(rng, bounds, scenario.num_requests)
                        for bounds in (scenario.prompt_tokens, scenario.reply_tokens))
    timestamps = np.cumsum(rng.exponential(1.0, scenario.num_requests))
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(BURSTGPT_COLUMNS)
        for t, p, r in zip(timestamps, prompts, replies, strict=True):
            writer.writerow([f"{t:.3f}", "ChatGPT", p, r, p + r, "Conversation log"])
    return Workload(path, [[(p, r)] for p, r in zip(prompts, replies, strict=True)])


def _write_interactive(scenario: Scenario, path: Path) -> Workload:
    shape = argparse.Namespace(turns=scenario.turns, prompt_tokens=scenario.prompt_tokens,
                               reply_tokens=scenario.reply_tokens, gap_s=GAP_S)
    rng = random.Random(scenario.seed)
    sessions = [session_rows(rng, session, 0.0, shape) for session in range(scenario.num_requests)]
    path.write_text("".join(json.dumps(row) + "\n" for rows in sessions for row in rows))
    return Workload(path, [[(row["request_tokens"], row["response_tokens"]) for row in rows] for rows in sessions])


def fits_blocks(workload: Workload, users: int, spoken: bool) -> dict[str, int]:
    """Thinker and talker pools that hold every session in flight at once (the `users` largest, whole,
    with a margin), never below the pools as served."""
    return {stage: max(SERVED_BLOCKS, math.ceil(FITS_MARGIN * sum(sorted(need)[-users:])))
            for stage, need in session_blocks(workload, spoken).items()}


def largest_session_blocks(workload: Workload, spoken: bool) -> dict[str, int]:
    """The thinker and talker blocks of the largest session's whole context: a pool must hold one."""
    return {stage: max(need) for stage, need in session_blocks(workload, spoken).items()}


def session_blocks(workload: Workload, spoken: bool) -> dict[str, list[int]]:
    """Each session's thinker and talker blocks by the end of its last turn (an upper bound: every turn whole)."""
    prompt_scale = SPOKEN_POSITIONS_PER_TOKEN if spoken else 1
    return {
        "thinker": [sum(_blocks(p * prompt_scale + r + TURN_MARGIN) for p, r in turns) for turns in workload.sessions],
        "talker": [sum(_blocks(r * TALKER_FRAMES_PER_TOKEN + TURN_MARGIN) for _, r in turns)
                   for turns in workload.sessions],
    }


def _blocks(positions: int) -> int:
    return -(-positions // BLOCK_SIZE)


def _within(value: int, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def _log_uniform(rng: np.random.Generator, bounds: tuple[int, int], n: int) -> list[int]:
    low, high = math.log(bounds[0]), math.log(bounds[1] + 1)
    return [int(x) for x in np.clip(np.floor(np.exp(rng.uniform(low, high, n))), bounds[0], bounds[1])]
