"""One request of a replayed workload, and reading published records with their locations.

Every reader here names where a value came from — `data.json[12].conversations[0]`,
`trace.csv line 7` — and a value that cannot be read raises `WorkloadError` starting
with that location.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorkloadRequest:
    """A request to replay: the text to send and how many tokens to generate.

    `prompt_tokens` is the length of `prompt` under LiveServe's tokenizer as the
    server encodes user text; `arrival_s` is the trace timestamp relative to the
    trace's first request (None when the dataset has no timing); `turn` is 0-based
    within `session_id`; `think_time_s` is the recorded gap before this turn within
    its session (None for a first turn or without timing).
    """

    request_id: str
    prompt: str
    prompt_tokens: int
    response_tokens: int
    arrival_s: float | None = None
    session_id: str | None = None
    turn: int = 0
    think_time_s: float | None = None


class WorkloadError(ValueError):
    """A workload file that cannot be read; the message is `"<location>: <problem>"`."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")


_INTEGER = re.compile(r"\s*-?[0-9]+\s*")


def count_field(value: object, where: str, name: str) -> int:
    """A non-negative integer: a JSON integer or a decimal string (CSV)."""
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise WorkloadError(where, f"{name!r} is not an integer: {value!r}")
    if value < 0:
        raise WorkloadError(where, f"{name!r} is negative: {value}")
    return value


def seconds_field(value: object, where: str, name: str) -> float:
    """A finite number of seconds: a JSON number or a decimal string (CSV)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise WorkloadError(where, f"{name!r} is not a number: {value!r}") from None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise WorkloadError(where, f"{name!r} is not a finite number: {value!r}")
    return float(value)


def text_field(record: dict, where: str, name: str) -> str:
    """A string member of a JSON object."""
    value = member(record, where, name)
    if not isinstance(value, str):
        raise WorkloadError(where, f"{name!r} is not a string: {type(value).__name__}")
    return value


def id_field(record: dict, where: str, name: str) -> str:
    """An identifier published as a JSON string or integer."""
    value = member(record, where, name)
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise WorkloadError(where, f"{name!r} is not a string or integer: {type(value).__name__}")
    return str(value)


def member(record: dict, where: str, name: str) -> object:
    if name not in record:
        raise WorkloadError(where, f"missing {name!r}")
    return record[name]


def json_object(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise WorkloadError(where, f"expected a JSON object, found {_json_type(value)}")
    return value


def json_array(value: object, where: str) -> list:
    if not isinstance(value, list):
        raise WorkloadError(where, f"expected a JSON array, found {_json_type(value)}")
    return value


def read_json(path: Path) -> object:
    """The whole file as one JSON document."""
    with path.open(encoding="utf-8") as file:
        try:
            return json.load(file)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path.name} line {exc.lineno} column {exc.colno}", f"bad JSON: {exc.msg}") from None


def jsonl_records(path: Path) -> Iterator[tuple[str, dict]]:
    """(`"<file> line <n>"`, object) for each non-blank line, read one line at a time."""
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise WorkloadError(where, f"bad JSON: {exc.msg}") from None
            yield where, json_object(value, where)


def csv_records(path: Path, required: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """(`"<file> line <n>"`, row by column name) for each non-blank data row.

    Columns are found by their header names, in any order; extra columns are kept
    in the row and ignored by callers. A missing required column or a row whose
    field count differs from the header's is an error.
    """
    with path.open(encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        if header is None:
            raise WorkloadError(path.name, "empty file, expected a header row")
        missing = [name for name in required if name not in header]
        if missing:
            raise WorkloadError(f"{path.name} line 1", f"missing column {missing[0]!r} (header: {','.join(header)})")
        for row in reader:
            if not row:
                continue
            where = f"{path.name} line {reader.line_num}"
            if len(row) != len(header):
                raise WorkloadError(where, f"expected {len(header)} fields as in the header, found {len(row)}")
            yield where, dict(zip(header, row, strict=True))


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
