"""The robustness grid's scenarios: one seeded draw per scenario over every dimension the grid varies.

Scenario `index` of grid `seed` is drawn from its own generator (`default_rng([seed, index])`), so a grid of
N scenarios is the first N of any larger grid of the same seed, and any new seed is a fresh grid.

Dimensions and their distributions:
- source: ShareGPT-format (0.4), BurstGPT-format (0.3), interactive-format multi-turn sessions (0.3);
- length mix: a prompt and a reply token range; ShareGPT keeps the conversations inside the ranges (one of
  a few windows on the published lengths), BurstGPT draws log-uniformly inside them, interactive uniformly
  (as benchmarks/make_interactive_trace.py); a spoken prompt is at most SPOKEN_MAX_PROMPT tokens;
- arrivals: all at once (0.3), Poisson at 1-16 req/s (0.4), gamma-bursty at 2-16 req/s, shape 0.1-0.5 (0.3);
- users in flight: 4-64, log-uniform; requests: 1.5-4 per user (sessions of 2-5 turns: 1-2.5 per user);
- voice users holding their slot until the reply is heard (0.6) or freeing it at the last audio chunk;
- barge-in probability: uniform in [0, 0.7];
- spoken prompts (0.3) or text items;
- KV pools: everything fits (0.35), else a share of the working set uniform in [0.25, 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SOURCES = {"sharegpt": 0.4, "burstgpt": 0.3, "interactive": 0.3}
ARRIVALS = {"at-once": 0.3, "poisson": 0.4, "gamma": 0.3}
POISSON_RATES = (1.0, 2.0, 4.0, 8.0, 16.0)
GAMMA_RATES = (2.0, 4.0, 8.0, 16.0)
GAMMA_SHAPES = (0.1, 0.25, 0.5)
USERS = (4, 64)
BARGE_IN = (0.0, 0.7)
MIN_SHARE = 0.25
P_FITS, P_HOLD, P_SPOKEN = 0.35, 0.6, 0.3
SPOKEN_MAX_PROMPT = 48  # tokens: about 15 s of speech
MAX_REQUESTS = 128
SHAREGPT_PROMPTS = ((4, 1024), (4, 1024), (4, 48), (48, 1024))  # windows on the published lengths (the
SHAREGPT_REPLIES = ((4, 2048), (4, 2048), (4, 200), (100, 600), (300, 2048))  # unfiltered one drawn twice as often)


@dataclass(frozen=True)
class Scenario:
    """One point of the grid. `num_requests` counts requests (for `interactive`: sessions of `turns` turns);
    `request_rate` is inf for arrivals all at once; `pool_share` is the thinker's and talker's KV pools as a
    share of the working set (1.0: everything fits); `seed` seeds the replay's plan and its sample."""

    index: int
    seed: int
    source: str
    prompt_tokens: tuple[int, int]
    reply_tokens: tuple[int, int]
    turns: int
    num_requests: int
    arrival: str
    request_rate: float
    burstiness: float
    users: int
    hold_until_heard: bool
    barge_in_prob: float
    spoken: bool
    pool_share: float

    @property
    def total_requests(self) -> int:
        return self.num_requests * self.turns


def draw_scenarios(seed: int, count: int) -> list[Scenario]:
    """Scenarios 0 .. count-1 of grid `seed`."""
    return [draw_scenario(seed, index) for index in range(count)]


def draw_scenario(seed: int, index: int) -> Scenario:
    rng = np.random.default_rng([seed, index])
    source = _pick(rng, SOURCES)
    spoken = bool(rng.random() < P_SPOKEN)
    prompts, replies = _length_mix(rng, source, spoken)
    users = _log_uniform_int(rng, *USERS)
    turns = int(rng.integers(2, 6)) if source == "interactive" else 1
    per_user = rng.uniform(1.0, 2.5) if source == "interactive" else rng.uniform(1.5, 4.0)
    num_requests = int(np.clip(round(users * per_user), 4 if turns > 1 else 16, MAX_REQUESTS // turns))
    arrival = _pick(rng, ARRIVALS)
    rate, shape = _arrivals(rng, arrival)
    return Scenario(
        index=index, seed=int(rng.integers(2**31)), source=source, prompt_tokens=prompts, reply_tokens=replies,
        turns=turns, num_requests=num_requests, arrival=arrival, request_rate=rate, burstiness=shape, users=users,
        hold_until_heard=bool(rng.random() < P_HOLD), barge_in_prob=round(float(rng.uniform(*BARGE_IN)), 3),
        spoken=spoken, pool_share=1.0 if rng.random() < P_FITS else round(float(rng.uniform(MIN_SHARE, 1.0)), 3),
    )


def _pick(rng: np.random.Generator, weights: dict[str, float]) -> str:
    return str(rng.choice(list(weights), p=list(weights.values())))


def _length_mix(rng: np.random.Generator, source: str, spoken: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    if source == "sharegpt":
        prompts = SHAREGPT_PROMPTS[rng.integers(len(SHAREGPT_PROMPTS))]
        replies = SHAREGPT_REPLIES[rng.integers(len(SHAREGPT_REPLIES))]
    elif source == "burstgpt":
        prompts = _range(rng, (4, 256), (2.0, 16.0), 1024)
        replies = _range(rng, (8, 256), (2.0, 8.0), 1200)
    else:
        prompts = _range(rng, (4, 96), (1.2, 3.0), 1024)
        replies = _range(rng, (8, 160), (1.2, 3.0), 1200)
    if spoken:
        prompts = (min(prompts[0], SPOKEN_MAX_PROMPT // 2), min(prompts[1], SPOKEN_MAX_PROMPT))
    return prompts, replies


def _range(rng: np.random.Generator, low: tuple[int, int], spread: tuple[float, float], cap: int) -> tuple[int, int]:
    """[lo, hi]: lo log-uniform in `low`, hi = lo x a log-uniform factor in `spread`, at most `cap`."""
    lo = _log_uniform_int(rng, *low)
    return lo, max(lo + 1, min(cap, round(lo * math.exp(rng.uniform(*np.log(spread))))))


def _log_uniform_int(rng: np.random.Generator, low: int, high: int) -> int:
    return int(np.clip(round(math.exp(rng.uniform(math.log(low), math.log(high)))), low, high))


def _arrivals(rng: np.random.Generator, arrival: str) -> tuple[float, float]:
    """(request rate, gamma shape) of the arrival kind."""
    if arrival == "at-once":
        return math.inf, 1.0
    if arrival == "poisson":
        return float(rng.choice(POISSON_RATES)), 1.0
    return float(rng.choice(GAMMA_RATES)), float(rng.choice(GAMMA_SHAPES))
