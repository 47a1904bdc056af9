"""BurstGPT traces (github.com/HPMLL/BurstGPT) as workload requests.

Format, as published: CSV with a header row. BurstGPT_1/_2 (and `_without_fails_`):
`Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`; BurstGPT_3
(release v2.0) adds `Session ID,Elapsed time` after `Timestamp`. Columns are found by
name in any order; only Timestamp (seconds, integer or float), Model (`ChatGPT` or
`GPT-4`), Request tokens and Response tokens are required, Session ID is used when
present, the rest are ignored.

Rows with 0 response tokens (failed requests) are skipped, as are rows whose Model
differs from `model_filter`; the first `num_requests` remaining rows in file order are
kept and reading stops there. Prompts are filler text of exactly `Request tokens`
tokens (see `synthetic_text`).

Timing (only with `trace_arrivals`; otherwise None): `arrival_s = (t - t0) / time_scale`
with t0 the earliest kept timestamp, so time_scale 2 replays twice as fast. In the
Session ID variant a session's kept rows, in file order, are its turns 0, 1, ...
and `think_time_s` is the gap to the session's previous kept row, also divided by
time_scale. An empty Session ID means no session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from lab.workloads.request import WorkloadRequest, count_field, csv_records, seconds_field
from lab.workloads.synthetic_text import FillerText
from stages.models.tokenizer import TextTokenizer

REQUIRED_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
SESSION_COLUMN = "Session ID"


class TraceRow(NamedTuple):
    where: str
    timestamp: float
    model: str
    request_tokens: int
    response_tokens: int
    session_id: str | None


def load_burstgpt(
    path: str | Path,
    tokenizer: TextTokenizer,
    *,
    model_filter: str | None = None,
    trace_arrivals: bool = False,
    time_scale: float = 1.0,
    num_requests: int | None = None,
) -> list[WorkloadRequest]:
    """Requests for the kept rows of a BurstGPT CSV, in file order."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    if num_requests is not None and num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    rows = _kept_rows(read_rows(Path(path)), model_filter, num_requests)
    filler = FillerText(tokenizer)
    start = min((row.timestamp for row in rows), default=0.0)
    return [
        WorkloadRequest(
            request_id=row.where,
            prompt=filler.prompt(row.request_tokens),
            prompt_tokens=row.request_tokens,
            response_tokens=row.response_tokens,
            arrival_s=_timed(row.timestamp - start, time_scale, trace_arrivals),
            session_id=row.session_id,
            turn=turn,
            think_time_s=_timed(gap, time_scale, trace_arrivals),
        )
        for row, (turn, gap) in zip(rows, _session_turns(rows), strict=True)
    ]


def read_rows(path: Path) -> Iterator[TraceRow]:
    """Every data row of a BurstGPT CSV, validated, failed ones included."""
    for where, row in csv_records(path, REQUIRED_COLUMNS):
        yield TraceRow(
            where,
            seconds_field(row["Timestamp"], where, "Timestamp"),
            row["Model"],
            count_field(row["Request tokens"], where, "Request tokens"),
            count_field(row["Response tokens"], where, "Response tokens"),
            row.get(SESSION_COLUMN) or None,
        )


def _kept_rows(rows: Iterator[TraceRow], model_filter: str | None, num_requests: int | None) -> list[TraceRow]:
    """Rows that did not fail and match the model, up to `num_requests`; reading stops there."""
    kept = []
    for row in rows:
        if row.response_tokens > 0 and model_filter in (None, row.model):
            kept.append(row)
        if num_requests is not None and len(kept) >= num_requests:
            break
    return kept


def _session_turns(rows: list[TraceRow]) -> list[tuple[int, float | None]]:
    """(turn, seconds since the session's previous row) per row; (0, None) outside sessions."""
    last_seen: dict[str, tuple[int, float]] = {}
    turns = []
    for row in rows:
        previous = last_seen.get(row.session_id) if row.session_id else None
        turn, gap = (0, None) if previous is None else (previous[0] + 1, row.timestamp - previous[1])
        if row.session_id:
            last_seen[row.session_id] = (turn, row.timestamp)
        turns.append((turn, gap))
    return turns


def _timed(seconds: float | None, time_scale: float, trace_arrivals: bool) -> float | None:
    """`seconds / time_scale`, or None without trace timing."""
    return seconds / time_scale if trace_arrivals and seconds is not None else None
