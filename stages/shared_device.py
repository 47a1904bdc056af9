"""Stages that compute on one device tell each other when a listener is waiting on their work, and when their KV
is under pressure."""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence

Board = tuple[MutableSequence[int], int]  # one device's slots, and the first of them a board hands out
WAITING, KV_PRESSED = 1, 2  # the bits of a slot


class SharedDevice:
    """Whether any stage computing on this stage's devices serves a listener who is waiting (for first
    audio, or with playback about to run dry: the urgency policy's U0 and U1), and whether any has its KV
    under pressure (past the share of its pool where pacing stops).

    Stages on one device (one CPU, one GPU) slow each other down, so work
    far ahead of its listener at one stage delays the first audio another stage is
    producing; and work one stage holds back keeps the next stage's KV for the same reply
    in use, so pacing at a thinker fills its talker's pool. Each stage's policy `join`s once and
    `report`s every round (a stage with no ready work reports that nobody waits). One slot per
    stage on each device's board (its bits WAITING and KV_PRESSED), written only by its engine
    thread and read by the others without a lock: a read may be one round stale. Stages in
    separate processes share a device's `slots` (a byte array in shared memory, one per stage),
    each process's board handing out its own slot from `first_slot`. A stage computing on several
    devices (a tensor-parallel replica on several GPUs) is on every one's board (`spanning`): it
    reports to each, and sees what any stage that shares any of its devices reports.
    """

    def __init__(self, slots: MutableSequence[int] | None = None, first_slot: int = 0) -> None:
        self._boards = [_Board([] if slots is None else slots, first_slot)]
        self._seats: list[tuple[int, ...]] = []  # per join, its slot on each board

    @classmethod
    def spanning(cls, boards: Sequence[Board]) -> SharedDevice:
        """The boards of every device a stage computes on (at least one)."""
        if not boards:
            raise ValueError("a stage computes on at least one device")
        device = cls(*boards[0])
        device._boards += [_Board(slots, first_slot) for slots, first_slot in boards[1:]]
        return device

    def join(self) -> int:
        """A new seat for one stage's reports: a slot on every board."""
        self._seats.append(tuple(board.join() for board in self._boards))
        return len(self._seats) - 1

    def report(self, seat: int, waiting: bool, kv_pressed: bool = False) -> None:
        value = WAITING * waiting | KV_PRESSED * kv_pressed
        for board, slot in zip(self._boards, self._seats[seat]):
            board.slots[slot] = value

    @property
    def listener_waiting(self) -> bool:
        return self._any(WAITING)

    @property
    def kv_pressed(self) -> bool:
        return self._any(KV_PRESSED)

    def _any(self, bit: int) -> bool:
        return any(value & bit for board in self._boards for value in board.slots)


class _Board:
    """One device's slots, and the next this process hands out."""

    def __init__(self, slots: MutableSequence[int], next_slot: int) -> None:
        self.slots, self.next_slot = slots, next_slot

    def join(self) -> int:
        slot, self.next_slot = self.next_slot, self.next_slot + 1
        if slot == len(self.slots):
            self.slots.append(0)
        return slot
