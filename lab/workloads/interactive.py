"""Multi-turn session traces as workload requests.

Format, chosen by extension: `.csv` (a header row naming the columns, any order,
extra columns ignored) or `.jsonl` (one JSON object per line, extra members ignored),
with the fields `session_id` (string; JSON may use an integer), `timestamp` (seconds,
when the turn's request was recorded), `turn` (integer >= 0; orders a session's
turns, need not start at 0 or be contiguous), `request_tokens`, `response_tokens`
(integers >= 0).

Requests come grouped by session, sessions in order of their first timestamp (ties in
file order), turns in `turn` order and renumbered 0, 1, ... Every turn gets
`arrival_s = (timestamp - earliest timestamp) / time_scale`; later turns also get
`think_time_s = (timestamp(k) - timestamp(k-1)) / time_scale`, the raw gap between the
recorded request times. If those are request starts the gap includes the previous
turn's response; a replay that paces turns after each response subtracts it. Prompts
are filler text of exactly `request_tokens` tokens (see `synthetic_text`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from lab.workloads.request import (
    WorkloadError,
    WorkloadRequest,
    count_field,
    csv_records,
    id_field,
    jsonl_records,
    member,
    seconds_field,
)
from lab.workloads.synthetic_text import FillerText
from stages.models.tokenizer import TextTokenizer

FIELDS = ("session_id", "timestamp", "turn", "request_tokens", "response_tokens")


class TurnRecord(NamedTuple):
    where: str
    session_id: str
    timestamp: float
    turn: int
    request_tokens: int
    response_tokens: int


def load_interactive(
    path: str | Path, tokenizer: TextTokenizer, *, time_scale: float = 1.0, num_sessions: int | None = None
) -> list[WorkloadRequest]:
    """Requests of the first `num_sessions` sessions (all when None) to start."""
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    if num_sessions is not None and num_sessions < 0:
        raise ValueError(f"num_sessions must be >= 0, got {num_sessions}")
    sessions = list(group_sessions(read_turns(Path(path))).values())
    sessions.sort(key=lambda turns: turns[0].timestamp)
    sessions = sessions[:num_sessions]
    start = min((turns[0].timestamp for turns in sessions), default=0.0)
    filler = FillerText(tokenizer)
    return [
        WorkloadRequest(
            request_id=f"{record.session_id}:{turn}",
            prompt=filler.prompt(record.request_tokens),
            prompt_tokens=record.request_tokens,
            response_tokens=record.response_tokens,
            arrival_s=(record.timestamp - start) / time_scale,
            session_id=record.session_id,
            turn=turn,
            think_time_s=(record.timestamp - turns[turn - 1].timestamp) / time_scale if turn else None,
        )
        for turns in sessions
        for turn, record in enumerate(turns)
    ]


def read_turns(path: Path) -> Iterator[TurnRecord]:
    """Every record of a `.csv` or `.jsonl` trace, validated."""
    if path.suffix == ".csv":
        records = csv_records(path, FIELDS)
    elif path.suffix == ".jsonl":
        records = jsonl_records(path)
    else:
        raise WorkloadError(path.name, f"unknown extension {path.suffix!r}, expected .csv or .jsonl")
    for where, record in records:
        session_id = id_field(record, where, "session_id")
        if not session_id:
            raise WorkloadError(where, "'session_id' is empty")
        yield TurnRecord(
            where,
            session_id,
            seconds_field(member(record, where, "timestamp"), where, "timestamp"),
            count_field(member(record, where, "turn"), where, "turn"),
            count_field(member(record, where, "request_tokens"), where, "request_tokens"),
            count_field(member(record, where, "response_tokens"), where, "response_tokens"),
        )


def group_sessions(records: Iterator[TurnRecord]) -> dict[str, list[TurnRecord]]:
    """Each session's records in turn order; a repeated turn or time running backwards is an error."""
    sessions: dict[str, list[TurnRecord]] = {}
    for record in records:
        sessions.setdefault(record.session_id, []).append(record)
    for turns in sessions.values():
        turns.sort(key=lambda record: record.turn)
        for previous, record in zip(turns, turns[1:]):
            if record.turn == previous.turn:
                raise WorkloadError(record.where, f"session {record.session_id!r} repeats turn {record.turn}")
            if record.timestamp < previous.timestamp:
                problem = f"turn {record.turn} of session {record.session_id!r} is earlier than turn {previous.turn}"
                raise WorkloadError(record.where, problem)
    return sessions
