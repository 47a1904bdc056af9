"""A stage without KV (encoder, vocoder): its scheduler runs through NoKVResidency and never asks whether there is KV."""

import pytest

from stages.config import SchedulerConfig
from stages.engine import StageEngine
from stages.no_kv_residency import NoKVResidency
from stages.plan import RunnerOutput
from stages.requests import EncoderRequest
from stages.scheduler import Scheduler
from tests.stages.scheduler_harness import FakeClock, chunks_of, thinker


def test_the_null_residency_answers_as_a_stage_without_kv():
    residency, request = NoKVResidency(), thinker("a", 0.0, [1, 2, 3], max_tokens=None)
    assert residency.never_fits(request, 10**9) is None and residency.ensure_resident(request, 0.0) == 0
    assert residency.shortfall(request, 10**9, growth=5, now=0.0) == 0 and residency.blocks_held("a") == 0
    assert residency.resident_tokens(["a"]) == {} and not residency.is_waiting_on_kv
    assert residency.block_counts() == (0, 0, 0) and residency.kv_counters() == {}
    assert residency.speech_started("a", 1.0, 0.0) is None and residency.speech_paused("a", 1.0, 0.0) is None
    residency.truncate(request, 1)  # the request alone
    assert list(request.token_ids) == [1]


def test_a_scheduler_without_kv_chunks_truncates_and_reports_no_kv():
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=4), None, FakeClock())
    assert isinstance(scheduler.residency, NoKVResidency)
    scheduler.add(thinker("a", 0.0, list(range(1, 7)), max_tokens=None, close=False))
    for expected in ([("a", 0, 4)], [("a", 4, 2)], []):
        plan = scheduler.schedule()
        assert chunks_of(plan) == expected and plan.preempted == []
        scheduler.update_from_output(plan, RunnerOutput({}))
        scheduler.check_integrity()
    scheduler.truncate("a", 2)
    assert scheduler.requests["a"].num_computed == 2 and scheduler.resident_tokens() == {}
    assert not scheduler.is_waiting_on_kv and scheduler.num_preemptions == 0
    status = StageEngine("encoder", scheduler, runner=None, emit=lambda outputs: None).status()
    assert (status.kv_blocks_used, status.kv_blocks_free, status.kv_blocks_peak, status.kv_counters) == (0, 0, 0, {})


def test_a_request_that_cannot_be_truncated_still_says_so():
    scheduler = Scheduler(SchedulerConfig(), None, FakeClock())
    scheduler.add(EncoderRequest("e", 0.0, chunk_frames=4, samples_per_frame=1280))
    with pytest.raises(ValueError, match="cannot be truncated"):
        scheduler.truncate("e", 0)
