"""One JSON line per response (`runtime.trace_dir`/responses.jsonl), to line up with the stages' step traces."""

from __future__ import annotations

import json
from pathlib import Path


class ResponseTrace:
    """Appends each ended response: its session, its request ids by stage (as in the stage traces), the
    clock times (time.monotonic) of the end of the user's turn, the first audio sent and the
    end, what it produced, and the session's tracing setting (a client's workflow name, group id and
    metadata: how this server keeps a client's traces). Each line is flushed as written."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8", buffering=1)

    def record(self, **fields: object) -> None:
        self._file.write(json.dumps(fields) + "\n")

    def close(self) -> None:
        self._file.close()
