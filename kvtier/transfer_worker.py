"""Runs transfer jobs chunk by chunk, most urgent first, on a thread or when told to."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from kvtier.block_copier import BlockCopier
from kvtier.transfer_job import TransferJob

TRANSFER_MODES = ("thread", "inline")


class TransferWorker:
    """Copies the bytes of submitted jobs; knows nothing of pools, tables or policies.

    Contract: `submit`, `promote` and `cancel` come from the engine thread. Jobs run
    `chunk_blocks` blocks at a time; before each chunk the worker picks the most
    urgent waiting job (foreground load, then background load, then store, first
    come first within each), so a foreground load overtakes a background load or a
    store half-way. A job that is done or cancelled mid-chunk goes to the finished
    list (`take_finished`) and `on_finished` is called, on the worker's thread.
    `cancel` stops a waiting job at once (it is then the caller's to complete, not
    listed) and a running one after its current chunk. Block ids stay valid while
    copied because jobs hold references on them until they are completed.

    Modes: "thread" (a daemon thread runs jobs as they come) or "inline" (nothing
    runs until `run_chunk`/`run_all` is called: deterministic tests).
    """

    def __init__(self, copier: BlockCopier, chunk_blocks: int, mode: str = "thread",
                 on_finished: Callable[[], None] | None = None) -> None:
        if mode not in TRANSFER_MODES:
            raise ValueError(f"transfer_mode must be one of {list(TRANSFER_MODES)}, got {mode!r}")
        self.copier, self.chunk_blocks, self.on_finished = copier, chunk_blocks, on_finished
        self._queues: tuple[deque[TransferJob], ...] = (deque(), deque(), deque())
        self._finished: list[TransferJob] = []
        self._lock = threading.Condition()
        self._closed = False
        self._thread = None
        if mode == "thread":
            self._thread = threading.Thread(target=self._serve, name="kv-transfer", daemon=True)
            self._thread.start()

    def submit(self, job: TransferJob) -> None:
        with self._lock:
            self._queues[job.priority].append(job)
            self._lock.notify_all()

    def promote(self, job: TransferJob) -> None:
        """Make a background load a foreground one (a running one from its next chunk)."""
        with self._lock:
            if not job.is_running and not job.is_finished:
                self._queues[job.priority].remove(job)
                self._queues[0].append(job)
            job.background = False

    def cancel(self, job: TransferJob) -> bool:
        """Stop `job`. True: stopped now and not listed as finished; False: it is (or will be, after its chunk)."""
        with self._lock:
            job.cancelled = True
            if job.is_running or job.is_finished:
                return False
            self._queues[job.priority].remove(job)
            return True

    def next_chunk_blocks(self) -> int:
        """Blocks the next `run_chunk` would copy if nothing more urgent came first (0: no job waits)."""
        with self._lock:
            job = next((queue[0] for queue in self._queues if queue), None)
            return 0 if job is None else min(self.chunk_blocks, job.num_blocks - job.num_copied)

    def run_chunk(self) -> bool:
        """Copy one chunk of the most urgent job; False if no job waits."""
        with self._lock:
            job = next((queue.popleft() for queue in self._queues if queue), None)
            if job is None:
                return False
            job.is_running = True
        start = job.num_copied
        end = min(start + self.chunk_blocks, job.num_blocks)
        seconds = self.copier.copy(job.kind, job.src_ids[start:end], job.dst_ids[start:end])
        with self._lock:
            job.is_running, job.num_copied, job.seconds = False, end, job.seconds + seconds
            job.is_finished = job.cancelled or end == job.num_blocks
            if job.is_finished:
                self._finished.append(job)
                self._lock.notify_all()
            else:
                self._queues[job.priority].appendleft(job)
        if job.is_finished and self.on_finished is not None:
            self.on_finished()
        return True

    def run_all(self) -> int:
        """Run chunks until no job waits; how many ran."""
        count = 0
        while self.run_chunk():
            count += 1
        return count

    def take_finished(self) -> list[TransferJob]:
        with self._lock:
            finished, self._finished = self._finished, []
        return finished

    def wait(self, timeout_s: float) -> bool:
        """Block until some finished job waits to be taken (inline mode: never blocks)."""
        with self._lock:
            if self._thread is None:
                return bool(self._finished)
            return bool(self._lock.wait_for(lambda: self._finished or self._closed, timeout_s)) and bool(self._finished)

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._closed or any(self._queues))
                if self._closed:
                    return
            self.run_chunk()

    def close(self) -> None:
        """Stop the thread after its current chunk; waiting jobs never run. Idempotent."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
