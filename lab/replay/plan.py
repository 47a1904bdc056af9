"""From options to a replay plan: the workload's requests grouped into sessions, when each
session starts, and which requests the user interrupts and when."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lab.arrivals import poisson_gamma_arrivals
from lab.replay.options import ReplayOptions
from lab.workloads import (
    FillerText,
    WorkloadRequest,
    load_burstgpt,
    load_interactive,
    load_sharegpt,
    load_sharegpt_zh_en,
)
from stages.models.tokenizer import TextTokenizer


@dataclass(frozen=True)
class PlannedTurn:
    """One request; `barge_in_after_ms` is when, after its first audio, the user speaks over it (None: never)."""

    request: WorkloadRequest
    barge_in_after_ms: float | None = None


@dataclass(frozen=True)
class PlannedSession:
    """Requests replayed in order on one connection, the first released at `start_s`."""

    turns: tuple[PlannedTurn, ...]
    start_s: float


def load_requests(options: ReplayOptions, tokenizer: TextTokenizer) -> list[WorkloadRequest]:
    """The workload's requests (`num_requests` of them; for `interactive`, of that many sessions)."""
    n, path = options.num_requests, options.dataset_path
    if options.dataset == "sharegpt":
        return load_sharegpt(path, tokenizer, num_requests=n, seed=options.seed)
    if options.dataset == "sharegpt-zh-en":
        return load_sharegpt_zh_en(path, tokenizer, num_requests=n, seed=options.seed)
    if options.dataset == "burstgpt":
        return load_burstgpt(path, tokenizer, model_filter=options.model_filter,
                             trace_arrivals=options.trace_arrivals, time_scale=options.time_scale, num_requests=n)
    if options.dataset == "interactive":
        return load_interactive(path, tokenizer, time_scale=options.time_scale, num_sessions=n)
    return _random_requests(options, FillerText(tokenizer))


def _random_requests(options: ReplayOptions, filler: FillerText) -> list[WorkloadRequest]:
    rng = np.random.default_rng(options.seed)
    inputs, outputs = (_lengths(rng, length, options.random_range_ratio, options.num_requests)
                       for length in (options.random_input_len, options.random_output_len))
    return [WorkloadRequest(f"random-{i}", filler.prompt(n_in), n_in, n_out)
            for i, (n_in, n_out) in enumerate(zip(inputs, outputs, strict=True))]


def _lengths(rng: np.random.Generator, length: int, ratio: float, n: int) -> list[int]:
    low, high = max(1, int(length * (1 - ratio))), max(1, int(length * (1 + ratio)))
    return rng.integers(low, high + 1, size=n).tolist()


def plan_sessions(requests: list[WorkloadRequest], options: ReplayOptions, audio_ms_per_token: float) -> list[PlannedSession]:
    """Sessions in order of release.

    Requests sharing a `session_id` form one session in turn order; the others are a
    session each. Sessions start at the trace's timestamps when `trace_arrivals`,
    otherwise at gamma arrivals of `request_rate` / `burstiness`. Each request is
    interrupted with probability `barge_in_prob`, after a cut drawn from the
    workload's reply durations (`response_tokens * audio_ms_per_token`). The same
    seed gives the same plan.
    """
    rng = np.random.default_rng(options.seed)
    durations_ms = [r.response_tokens * audio_ms_per_token for r in requests]
    turns = [_planned(r, rng, options.barge_in_prob, durations_ms) for r in requests]
    groups = _group_by_session(turns)
    if options.trace_arrivals:
        starts = [group[0].request.arrival_s or 0.0 for group in groups]
    else:
        starts = poisson_gamma_arrivals(len(groups), options.request_rate, options.burstiness, options.seed) if groups else []
    sessions = [PlannedSession(tuple(group), start) for group, start in zip(groups, starts, strict=True)]
    return sorted(sessions, key=lambda s: s.start_s)


def _planned(request: WorkloadRequest, rng: np.random.Generator, p: float, durations_ms: list[float]) -> PlannedTurn:
    interrupts = rng.random() < p
    cut_ms = float(durations_ms[rng.integers(len(durations_ms))])
    return PlannedTurn(request, cut_ms if interrupts else None)


def _group_by_session(turns: list[PlannedTurn]) -> list[list[PlannedTurn]]:
    groups: dict[str, list[PlannedTurn]] = {}
    for index, turn in enumerate(turns):
        key = turn.request.session_id
        groups.setdefault(f"request {index}" if key is None else f"session {key}", []).append(turn)
    return [sorted(group, key=lambda t: t.request.turn) for group in groups.values()]
