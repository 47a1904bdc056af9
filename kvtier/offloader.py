"""The host tier's mechanism: two-phase transfers, atomic eviction, host room, preload.

Over 300 lines because the mechanism is one state machine over the same SequenceKV fields (job,
host copies, candidacy); split, each half would reach into the other's invariants.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from kvtier.block_copier import BlockCopier
from kvtier.block_pool import BlockPool
from kvtier.config import HostTierConfig
from kvtier.eviction import EvictionPolicy
from kvtier.eviction.candidates import EvictionCandidates
from kvtier.host_tier import HostTier
from kvtier.kv_cache import KVCache
from kvtier.sequence_kv import SequenceKV
from kvtier.tier import KVTier
from kvtier.tier_stats import TierStats
from kvtier.transfer_job import LOAD, STORE, TransferDone, TransferJob
from kvtier.transfer_worker import TransferWorker


class Offloader(KVTier):
    """The host tier: moves sequences' blocks between the device and host RAM; a policy picks eviction victims.

    Mechanism (engine thread only; the worker only copies bytes):
    - Two-phase transfers: `store` and `load` prepare a job (allocate its destination
      blocks, take a reference on its source blocks, pin the sequence) and submit it;
      `poll` completes finished jobs (a store makes its host copies valid, a load
      appends its device blocks to the table) and drops the job's references. A
      sequence has at most one job; a pinned sequence is never an eviction candidate.
    - `evict(n)` frees exactly n device blocks with valid host copies, or none: victims
      in policy order, each one's suffix first.
    - Host room: a store that does not fit drops host copies that duplicate device
      blocks of fully resident, unpinned sequences, least recently used first, never
      an only copy; if that is not enough the store is skipped.
    - `refresh(state)` follows every change to a sequence's blocks, hints or pins: it
      re-files the sequence among eviction candidates and droppable duplicates.
    """

    def __init__(self, device_pool: BlockPool, device_cache: KVCache, config: HostTierConfig,
                 policy: EvictionPolicy, clock: Callable[[], float], transfer_mode: str = "thread",
                 on_transfer_done: Callable[[], None] | None = None, copier_type: type[BlockCopier] = BlockCopier) -> None:
        self.device_pool, self.policy, self.clock = device_pool, policy, clock
        self.host = HostTier(device_cache.config, config)
        self.bytes_per_block = device_cache.config.bytes_per_block
        copier = copier_type(device_cache, self.host.cache, config.emulated_link_gbps)
        self.link_gbps = copier.measure_gbps(min(4, device_pool.num_blocks, config.num_blocks))
        self.worker = TransferWorker(copier, config.chunk_blocks, transfer_mode, on_transfer_done)
        self.candidates = EvictionCandidates(policy)
        self.counters = TierStats()
        self._jobs: dict[TransferJob, SequenceKV] = {}
        self._done: list[TransferDone] = []

    @property
    def has_transfers_in_flight(self) -> bool:
        return bool(self._jobs)

    @property
    def stats(self) -> dict[str, float]:
        return self.counters.as_dict(self.host.pool)

    def refresh(self, state: SequenceKV) -> None:
        device, pinned = len(state.table.block_ids), state.job is not None
        backed = device if state.is_evictable and not pinned and len(state.host_ids) >= device else 0
        self.candidates.update(state, backed, self.clock())
        self.host.file(state, 0 if pinned or state.num_offloaded else len(state.host_ids))

    def set_evictable(self, state: SequenceKV, evictable: bool) -> None:
        if not (evictable or state.is_evictable or state.is_warm):
            return  # in use and staying so: nothing to re-file
        if not evictable and state.is_warm and state.job is None and not state.num_offloaded:
            self.counters.add("preloads_hit")
        state.is_warm = state.is_warm and evictable
        state.is_evictable = evictable
        self.touch(state)

    def touch(self, state: SequenceKV) -> None:
        state.hint.last_used = self.clock()
        self.refresh(state)

    def num_evictable_blocks(self) -> int:
        self.candidates.expire(self.clock())
        return self.candidates.ready.num_blocks

    def evict(self, num_blocks: int, loader: SequenceKV | None = None) -> bool:
        """Free exactly `num_blocks` device blocks or nothing; `loader`: whom a background load makes room for."""
        admits = None if loader is None else (lambda victim: self.policy.may_displace(victim.hint, loader.hint))
        victims = self.candidates.take(num_blocks, self.clock(), admits)
        if victims is None:
            return False
        for state, count in victims:
            self.device_pool.release(state.table.block_ids[-count:])
            del state.table.block_ids[-count:]
            state.num_offloaded += count
            state.is_warm = False
            self.refresh(state)
        self.counters.add("evictions", num_blocks)
        self.counters.add(f"evictions_{self.policy.name}", num_blocks)
        return True

    def lift_protections(self) -> bool:
        return self.candidates.lift(self.clock()) > 0

    def evict_beyond(self, horizon: float) -> int:
        """Evict every ready candidate's backed blocks whose predicted next use is after `horizon`."""
        self.candidates.expire(self.clock())
        ready, total = self.candidates.ready, 0
        while len(ready) and ready.peek().hint.next_use > horizon:
            offered = ready.offered(ready.peek())
            self.evict(offered)  # the top candidate's blocks, all of them
            total += offered
        return total

    def store(self, state: SequenceKV) -> None:
        """Write back the device blocks without a valid host copy (none if a transfer is in flight)."""
        first, device = len(state.host_ids), state.table.block_ids
        if state.job is not None or first >= len(device):
            return
        count = len(device) - first
        short = count - self.host.pool.num_free
        dropped = self.host.make_room(count, state)
        if dropped is None:
            self.counters.add("stores_skipped")
            return
        self.counters.add("host_copies_dropped", max(0, short))
        for victim in dropped:
            self.refresh(victim)
        src = device[first:]
        self.device_pool.share(src)
        self._submit(state, TransferJob(state.seq, STORE, True, src, self.host.pool.allocate(count), first))

    def load(self, state: SequenceKV, background: bool, keep_free: int = 0) -> bool:
        """Bring the offloaded suffix back, evicting others for room (and for `keep_free` blocks more);
        False (nothing changed) if there is none."""
        job = state.job
        if job is not None and job.kind == LOAD:
            if job.background and not background:
                self._promote(state, job)
            return True
        count = state.num_offloaded
        if count == 0:
            return True
        short = count + keep_free - self.device_pool.num_free
        if short > 0:
            self.candidates.discard(state)
            if not self.evict(short, state if background else None):
                self.refresh(state)
                return False
        first = len(state.table.block_ids)
        src = state.host_ids[first:]
        self.host.pool.share(src)
        self._submit(state, TransferJob(state.seq, LOAD, background, src, self.device_pool.allocate(count), first))
        return True

    def _promote(self, state: SequenceKV, job: TransferJob) -> None:
        self.worker.promote(job)
        if job.is_preload:
            job.is_preload, state.preload_until = False, None
            self.counters.add("preloads_promoted")

    def _submit(self, state: SequenceKV, job: TransferJob) -> None:
        state.job = job
        self._jobs[job] = state
        self.refresh(state)
        self.worker.submit(job)

    def preload(self, state: SequenceKV | None, lead_s: float, keep_free: int = 0) -> str:
        """Start a background load if it can finish within `lead_s` (see KVCacheManager.preload)."""
        if state is None or not state.num_offloaded:
            outcome = "resident"
        elif state.job is not None:
            return "admitted"  # a load is already on its way: nothing new to count
        elif state.num_offloaded * self.bytes_per_block * 8 / (self.link_gbps * 1e9) > lead_s:
            outcome = "too_late"
        elif not self.load(state, background=True, keep_free=keep_free):
            outcome = "no_room"
        else:
            outcome = "admitted"
            state.job.is_preload, state.preload_until = True, self.clock() + lead_s
        self.counters.add(f"preloads_{outcome}")
        return outcome

    def cancel_load(self, state: SequenceKV) -> bool:
        job = state.job
        if job is None or job.kind != LOAD or not job.background:
            return False
        self.counters.add("loads_cancelled")
        if job.is_preload:
            self.counters.add("preloads_cancelled")
            state.preload_until = None
        self._cancel(state, job)
        self.refresh(state)
        return True

    def _cancel(self, state: SequenceKV, job: TransferJob) -> None:
        state.job = None
        if self.worker.cancel(job):
            self._complete(job)

    def invalidate(self, state: SequenceKV, block: int) -> None:
        """Host copies of live blocks from `block` on are stale or gone (a write or a truncation)."""
        if len(state.host_ids) > block:
            self.host.pool.release(state.host_ids[block:])
            del state.host_ids[block:]
        if state.job is not None:
            state.job.keep_below(block)
            if not state.job.num_kept:  # nothing of it is wanted any more
                self._cancel(state, state.job)
        self.refresh(state)

    def forget(self, state: SequenceKV) -> None:
        """Forget a freed sequence: cancel its transfer, release its host copies."""
        if state.job is not None:
            self._cancel(state, state.job)
        self.host.pool.release(state.host_ids)
        state.host_ids = []
        self.candidates.discard(state)
        self.host.file(state, 0)

    def dropped(self, state: SequenceKV, first: int, count: int) -> None:
        """Live blocks [first, first + count) were freed in place: their host copies go, and those after
        them move down with their blocks; a transfer in flight keeps only what it copies below `first`."""
        if state.job is not None:
            self.invalidate(state, first)
            return
        if len(state.host_ids) > first:
            self.host.pool.release(state.host_ids[first : first + count])
            del state.host_ids[first : first + count]
        self.refresh(state)  # fewer device blocks: host copies may now back all of them

    def poll(self) -> list[TransferDone]:
        for job in self.worker.take_finished():
            self._complete(job)
        done, self._done = self._done, []
        return done

    def wait_for_transfer(self, timeout_s: float) -> bool:
        return bool(self._done) or self.worker.wait(timeout_s)

    def _complete(self, job: TransferJob) -> None:
        state = self._jobs.pop(job)
        kept = 0 if job.cancelled else job.num_kept
        if job.kind == LOAD:
            self.host.pool.release(job.src_ids)
            state.table.block_ids.extend(job.dst_ids[:kept])
            state.num_offloaded -= kept
            self.device_pool.release(job.dst_ids[kept:])
        else:
            self.device_pool.release(job.src_ids)
            kept = kept if len(state.host_ids) == job.first_block else 0
            state.host_ids.extend(job.dst_ids[:kept])
            self.host.pool.release(job.dst_ids[kept:])
        self._account(job)
        if not job.cancelled:
            state.job = None
            if job.is_preload:
                self._warm(state)
            self.refresh(state)

    def _warm(self, state: SequenceKV) -> None:
        """A preload completed: protect the sequence until its expected use, within warm_protect_s."""
        now = self.clock()
        lead_left = max(0.0, state.preload_until - now) if state.preload_until is not None else 0.0
        state.protected_until = max(state.protected_until, now + min(lead_left, self.host.config.warm_protect_s))
        state.preload_until, state.is_warm = None, True
        self.counters.add("preloads_completed")

    def _account(self, job: TransferJob) -> None:
        num_bytes = job.num_copied * self.bytes_per_block
        self.counters.add_transfer(job, num_bytes)
        self._done.append(TransferDone(job.seq, job.kind, job.background, job.num_copied, num_bytes, job.seconds,
                                       job.cancelled))

    def close(self) -> None:
        self.worker.close()

    def check_integrity(self, states: Iterable[SequenceKV]) -> Counter[int]:
        """Checks the host tier, pins and heaps against `states`; returns the device references jobs hold."""
        host_refs: Counter[int] = Counter()
        device_refs: Counter[int] = Counter()
        for job, state in self._jobs.items():
            assert job.cancelled or state.job is job, f"{job.seq!r}: a job its sequence does not know"
            host_refs.update(job.host_ids)
            device_refs.update(job.device_ids)
        now, num_candidates, num_droppable = self.clock(), 0, 0
        for state in states:
            host_refs.update(state.host_ids)
            num_candidates += self._check_sequence(state, now)
            num_droppable += state in self.host.droppable
        self.host.pool.check_integrity()
        for block in range(self.host.pool.num_blocks):
            assert self.host.pool.ref_count(block) == host_refs[block], f"host block {block}: ref count != holders"
        self.candidates.check_integrity(now)
        self.host.droppable.check_integrity()
        assert len(self.candidates) == num_candidates, "a freed sequence is still an eviction candidate"
        assert len(self.host.droppable) == num_droppable, "a freed sequence still offers host copies"
        return device_refs

    def _check_sequence(self, state: SequenceKV, now: float) -> bool:
        job, device, hosted = state.job, len(state.table.block_ids), len(state.host_ids)
        live = device + state.num_offloaded
        assert job is None or (self._jobs.get(job) is state and not job.cancelled), f"{state.seq!r}: stale job"
        assert hosted <= live, f"{state.seq!r}: host copies past the end"
        assert not state.num_offloaded or hosted == live, f"{state.seq!r}: an offloaded block has no host copy"
        assert job is None or job.kind == STORE or job.first_block == device, f"{state.seq!r}: load off the suffix"
        backed = device if state.is_evictable and job is None and hosted >= device else 0
        assert self.candidates.offered(state) == backed, f"{state.seq!r}: eviction candidacy out of date"
        assert state not in self.candidates.ready or state.protected_until <= now, f"{state.seq!r}: protected"
        duplicates = 0 if job is not None or state.num_offloaded else hosted
        assert self.host.droppable.offered(state) == duplicates, f"{state.seq!r}: droppable host copies out of date"
        assert not duplicates or self.host.droppable.key_of(state) == (state.hint.last_used, state.serial)
        return backed > 0
