"""Ids the server hands out (items, responses, events, sessions): a prefix and a process-wide count."""

from __future__ import annotations

import itertools

_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):012d}"
