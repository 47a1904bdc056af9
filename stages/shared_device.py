"""Stages that compute on one device tell each other when a listener is waiting on their work."""

from __future__ import annotations

from collections.abc import MutableSequence


class SharedDevice:
    """Whether any stage computing on this device serves a listener who is waiting: for first
    audio, or with playback about to run dry (the urgency policy's U1 and U0).

    Stages on one device (one CPU, one GPU) slow each other down, so work
    far ahead of its listener at one stage delays the first audio another stage is
    producing. Each stage's policy `join`s once and `report`s every round (a stage with
    no ready work reports that nobody waits). One slot per stage, written only by its
    engine thread and read by the others without a lock: a read may be one round stale.
    Stages in separate processes share `slots` (an array in shared memory, one per
    stage), each process's board handing out its own slot from `first_slot`.
    """

    def __init__(self, slots: MutableSequence[bool] | None = None, first_slot: int = 0) -> None:
        self._waiting: MutableSequence[bool] = [] if slots is None else slots
        self._next_slot = first_slot

    def join(self) -> int:
        """A new slot for one stage's reports."""
        slot, self._next_slot = self._next_slot, self._next_slot + 1
        if slot == len(self._waiting):
            self._waiting.append(False)
        return slot

    def report(self, slot: int, waiting: bool) -> None:
        self._waiting[slot] = waiting

    @property
    def listener_waiting(self) -> bool:
        return True in self._waiting
