"""The transfer worker: chunking, priorities between chunks, promotion, cancellation, threads."""

import threading

import pytest

from kvtier.transfer_job import LOAD, STORE, TransferJob
from kvtier.transfer_worker import TransferWorker
from tests.kvtier.tier_harness import GatedCopier


class RecordingCopier:
    """Records every chunk copied as (sequence, first source id); takes 1 ms per chunk."""

    def __init__(self) -> None:
        self.chunks: list[tuple[str, int]] = []
        self.seqs: dict[int, str] = {}

    def copy(self, kind, src_ids, dst_ids) -> float:
        self.chunks.append((self.seqs[src_ids[0]], src_ids[0]))
        return 0.001


def job(copier: RecordingCopier, seq: str, kind: str, background: bool, first_id: int, num_blocks: int) -> TransferJob:
    ids = list(range(first_id, first_id + num_blocks))
    copier.seqs.update(dict.fromkeys(ids, seq))
    return TransferJob(seq, kind, background, ids, ids, 0)


def test_foreground_loads_go_first_then_background_loads_then_stores_chunk_by_chunk():
    copier = RecordingCopier()
    worker = TransferWorker(copier, chunk_blocks=2, mode="inline")
    store = job(copier, "s", STORE, True, 0, 4)
    background = job(copier, "b", LOAD, True, 10, 4)
    worker.submit(store)
    worker.submit(background)
    assert worker.run_chunk()  # the background load goes before the store
    foreground = job(copier, "f", LOAD, False, 20, 3)
    worker.submit(foreground)  # arrives half-way through the background load
    assert worker.run_all() == 5
    assert copier.chunks == [("b", 10), ("f", 20), ("f", 22), ("b", 12), ("s", 0), ("s", 2)]
    assert worker.take_finished() == [foreground, background, store]
    assert (background.num_copied, background.seconds) == (4, pytest.approx(0.002))
    assert not worker.run_chunk() and worker.take_finished() == []


def test_promotion_moves_a_background_load_ahead_of_others():
    copier = RecordingCopier()
    worker = TransferWorker(copier, chunk_blocks=1, mode="inline")
    first = job(copier, "first", LOAD, True, 0, 2)
    second = job(copier, "second", LOAD, True, 10, 2)
    worker.submit(first)
    worker.submit(second)
    worker.run_chunk()  # first is half-way
    worker.promote(second)  # second is needed now
    worker.run_all()
    assert copier.chunks == [("first", 0), ("second", 10), ("second", 11), ("first", 1)]
    assert not second.background and first.background


def test_cancel_drops_a_waiting_job_at_once():
    copier = RecordingCopier()
    worker = TransferWorker(copier, chunk_blocks=1, mode="inline")
    waiting = job(copier, "w", LOAD, True, 0, 2)
    worker.submit(waiting)
    worker.run_chunk()  # half-way, between chunks
    assert worker.cancel(waiting)  # stopped now: the caller completes it, it is not listed
    assert waiting.cancelled and waiting.num_copied == 1
    assert not worker.run_chunk() and worker.take_finished() == []


def test_cancel_stops_a_running_job_after_its_chunk():
    copier = RecordingCopier()
    worker = TransferWorker(copier, chunk_blocks=1, mode="thread")
    gate = GatedCopier(worker)
    running = job(copier, "r", LOAD, True, 0, 3)
    worker.submit(running)
    assert gate.started.wait(5.0)  # the worker is inside the first chunk
    assert not worker.cancel(running)  # it cannot stop now: it will list the job after the chunk
    gate.release.set()
    assert worker.wait(5.0)
    assert worker.take_finished() == [running] and running.cancelled and running.num_copied == 1
    worker.close()


def test_the_thread_runs_jobs_as_they_come_and_signals_each():
    copier = RecordingCopier()
    signalled = threading.Semaphore(0)
    worker = TransferWorker(copier, chunk_blocks=2, mode="thread", on_finished=signalled.release)
    jobs = [job(copier, f"j{i}", STORE, True, 10 * i, 3) for i in range(3)]
    for j in jobs:
        worker.submit(j)
    for _ in jobs:
        assert signalled.acquire(timeout=5.0)
    assert worker.wait(0.0)
    assert sorted(worker.take_finished(), key=lambda j: j.seq) == jobs
    assert not worker.wait(0.01)  # nothing left to take: times out
    worker.close()
    worker.close()
    assert not worker._thread.is_alive()


def test_modes_are_checked():
    with pytest.raises(ValueError, match=r"transfer_mode must be one of \['thread', 'inline'\]"):
        TransferWorker(RecordingCopier(), 1, mode="eager")
