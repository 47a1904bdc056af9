"""What a talker that reads the conversation (Qwen3-Omni's) takes from the thinker's context, by chat role."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TalkerContextRule:
    """Which context positions the talker conditions on, by chat role, all ids from the model's config.

    A position's role is the token right after the last `im_start_id` at or before it (the message
    it belongs to, as Qwen3-Omni's reference reads roles). The talker takes every position of role
    `user_id`, and the first `header` positions of the last message of role `assistant_id` (its
    `<|im_start|>assistant\\n`).
    """

    im_start_id: int
    user_id: int
    assistant_id: int
    header: int = 3


@dataclass(frozen=True)
class TalkerPrompt:
    """The rows a talker's turn starts from: the user positions' (`user_rows` [U, hidden], in position
    order; `user_is_audio` [U]: rows over audio placeholders, which are the thinker's hidden states at the
    talker's layer, the others its input embeddings) and the reply's assistant header's (`header_rows`)."""

    user_rows: torch.Tensor
    user_is_audio: torch.Tensor
    header_rows: torch.Tensor


class TalkerContext:
    """The rows of a thinker context's positions that a TalkerContextRule selects, kept as they are
    computed (each position's row once), cut with the context, and read as a TalkerPrompt."""

    def __init__(self, rule: TalkerContextRule) -> None:
        self.rule = rule
        self._starts: list[int] = []  # positions of im_start tokens, ascending
        self._rows: dict[int, tuple[torch.Tensor, bool]] = {}

    def extend(self, token_ids: list[int], base: int) -> None:
        """Tokens `token_ids` now occupy positions base, base + 1, ..."""
        self._starts += [base + i for i, token in enumerate(token_ids) if token == self.rule.im_start_id]

    def truncate(self, num_tokens: int) -> None:
        del self._starts[bisect.bisect_left(self._starts, num_tokens):]
        self._rows = {p: row for p, row in self._rows.items() if p < num_tokens}

    def positions(self, token_ids, start: int, end: int) -> list[int]:
        """The positions in [start, end) whose rows the talker takes (`token_ids`: the whole context)."""
        return [p for p in range(start, end) if self._takes(token_ids, p)]

    def _takes(self, token_ids, position: int) -> bool:
        role, start = self._role(token_ids, position)
        return role == self.rule.user_id or (role == self.rule.assistant_id and position - start < self.rule.header)

    def _role(self, token_ids, position: int) -> tuple[int | None, int]:
        """The role token of the message holding `position`, and where that message starts."""
        index = bisect.bisect_right(self._starts, position) - 1
        if index < 0 or self._starts[index] + 1 >= len(token_ids):
            return None, -1
        start = self._starts[index]
        return token_ids[start + 1], start

    def store(self, positions: list[int], rows: torch.Tensor, is_audio: list[bool]) -> None:
        for position, row, audio in zip(positions, rows, is_audio):
            self._rows[position] = (row, audio)

    def prompt(self, token_ids) -> TalkerPrompt:
        """The rows of the user positions, and of the header of the last assistant message (ValueError if
        the context has none, or a row was never computed)."""
        header = self._last_assistant_start(token_ids)
        users = sorted(p for p in self._rows if self._role(token_ids, p)[0] == self.rule.user_id)
        missing = [p for p in range(header, header + self.rule.header) if p not in self._rows]
        if missing:
            raise ValueError(f"the talker's rows of positions {missing} were never computed")
        rows = [self._rows[p][0] for p in users]
        width = self._rows[header][0].shape[-1]
        return TalkerPrompt(torch.stack(rows) if rows else torch.empty(0, width),
                            torch.tensor([self._rows[p][1] for p in users], dtype=torch.bool),
                            torch.stack([self._rows[p][0] for p in range(header, header + self.rule.header)]))

    def _last_assistant_start(self, token_ids) -> int:
        for start in reversed(self._starts):
            if start + 1 < len(token_ids) and token_ids[start + 1] == self.rule.assistant_id:
                return start
        raise ValueError("the context has no assistant message for the talker to voice")
