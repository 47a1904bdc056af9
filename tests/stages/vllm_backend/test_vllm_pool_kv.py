"""vLLM's block pool as the urgency policy reads a stage's KV (stages/vllm_backend/pool_kv.py, pure Python)."""

from __future__ import annotations

from stages.vllm_backend.pool_kv import VllmPoolKV


def test_the_pool_reads_vllms_counts_and_each_generation_holds_the_blocks_its_computed_tokens_fill():
    counts = {"used": 6, "usable": 24}
    kv = VllmPoolKV(lambda: (counts["used"], counts["usable"]), block_size=32)
    kv.observe([("s1/thinker#0", 32), ("s2/thinker#0", 33), ("s3/thinker#0", 0)])

    assert (kv.num_blocks, kv.num_used_blocks, kv.occupancy) == (24, 6, 0.25)
    assert [kv.num_blocks_held(f"s{i}/thinker#0") for i in (1, 2, 3)] == [1, 2, 0]
    assert kv.num_blocks_held("s9/thinker#0") == 0  # not holding KV: waiting, preempted or unknown
    assert kv.num_offloaded_blocks_total == 0
    counts["used"] = 12
    assert kv.occupancy == 0.5  # read at every call: the pool changes between steps
    kv.observe([("s2/thinker#0", 64)])
    assert (kv.num_blocks_held("s1/thinker#0"), kv.num_blocks_held("s2/thinker#0")) == (0, 2)
