"""The roofline cost model against figures worked out by hand."""

import pytest

from lab.sim.cost_model import H200, ChunkCost, DeviceSpec, ModelShape, step_cost, step_flops

# A small dense decoder whose numbers are easy to follow by hand.
DENSE = ModelShape("dense", num_layers=2, hidden=64, num_heads=4, num_kv_heads=2, head_dim=16, intermediate=128,
                   vocab=1000)
# Qwen3-Omni-30B-A3B's thinker: 48 layers, 2048 wide, 32 query / 4 KV heads of 128, 128 experts of 768, 8 active.
THINKER = ModelShape("thinker", num_layers=48, hidden=2048, num_heads=32, num_kv_heads=4, head_dim=128,
                     intermediate=768, vocab=151936, num_experts=128, num_active_experts=8)


def test_dense_params_by_hand():
    attention = 64 * 64 + 64 * 64 + 64 * 32 + 64 * 32  # Q, O (4 x 16 wide), K, V (2 x 16 wide)
    mlp = 3 * 64 * 128
    assert DENSE.attention_params == attention
    assert DENSE.total_params == 2 * (attention + mlp) + 2 * 1000 * 64
    assert DENSE.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2  # K and V, 2 layers, 2 heads x 16, bf16


def test_thinker_kv_is_96_kib_per_token():
    assert THINKER.kv_bytes_per_token == 96 * 1024


def test_memory_bound_decode_step_equals_hand_roofline():
    """Batch of 8 decodes at 1,000 positions of context on an H200: weights + KV over 4.8 TB/s."""
    device = DeviceSpec("H200", 989.0, 4.8, 141.0, step_overhead_s=0.002, row_overhead_s=0.0003)
    chunks = [ChunkCost(1, 1000)] * 8
    experts = 128 * (1 - (1 - 8 / 128) ** 8)  # distinct experts 8 tokens touch, per layer
    attention = 2 * 2048 * 4096 + 2 * 2048 * 512
    weights = (48 * (attention + 2048 * 128 + 3 * 2048 * 768 * experts) + 151936 * 2048) * 2
    kv = 8 * 1001 * 96 * 1024
    flops = (2 * 48 * (attention + 2048 * 128 + 8 * 3 * 2048 * 768) * 8 + 2 * 151936 * 2048 * 8
             + 4 * 48 * 32 * 128 * 8 * 1001)
    expected = max(flops / 989e12, (weights + kv) / 4.8e12) + 0.002 + 8 * 0.0003
    cost = step_cost(THINKER, device, chunks)
    assert cost.seconds == pytest.approx(expected, rel=1e-12)
    assert cost.bytes / 4.8e12 > cost.flops / 989e12  # decode is memory-bound


def test_compute_bound_prefill_step_equals_hand_roofline():
    """One 4,096-token prefill from an empty context: FLOPs over 989 TFLOPS."""
    cost = step_cost(DENSE, H200, [ChunkCost(4096, 0, num_sampled=1)])
    pairs = 4096 * 4097 // 2
    flops = 2 * 2 * (DENSE.attention_params + 3 * 64 * 128) * 4096 + 2 * 1000 * 64 + 4 * 2 * 4 * 16 * pairs
    assert cost.flops == flops
    assert cost.seconds == pytest.approx(max(flops / 989e12, cost.bytes / 4.8e12))


def test_chunked_prefill_attends_to_its_context():
    """A chunk after 100 cached positions attends to them: more pairs than the same chunk from 0."""
    later = step_cost(DENSE, H200, [ChunkCost(10, 100)])
    first = step_cost(DENSE, H200, [ChunkCost(10, 0)])
    assert later.flops - first.flops == 4 * 2 * 4 * 16 * (110 * 111 // 2 - 100 * 101 // 2 - 10 * 11 // 2)


def test_token_overhead_is_paid_per_new_position():
    """A CPU-like device: a prefill of 10 and two decodes pay 12 positions' overhead on top of the rest."""
    device = DeviceSpec("cpu", 0.042, 0.030, 24.0, step_overhead_s=0.008, row_overhead_s=0.0003)
    chunks = [ChunkCost(10, 0), ChunkCost(1, 50), ChunkCost(1, 70)]
    plain = step_cost(DENSE, device, chunks).seconds
    priced = step_cost(DENSE, DeviceSpec("cpu", 0.042, 0.030, 24.0, step_overhead_s=0.008, row_overhead_s=0.0003,
                                         token_overhead_s=0.0002), chunks).seconds
    assert priced - plain == pytest.approx(12 * 0.0002, rel=1e-9)


def test_host_transfer_at_the_link_rate():
    assert H200.transfer_s(55e9) == pytest.approx(1.0)


def test_dense_layers_among_moe_layers_by_hand():
    """4 layers, 2 of them dense: those have one MLP of 96 where the others have 8 experts of 32 and a router."""
    moe = ModelShape("moe", num_layers=4, hidden=64, num_heads=4, num_kv_heads=2, head_dim=16, intermediate=32,
                     vocab=1000, num_experts=8, num_active_experts=2, num_dense_layers=2, dense_intermediate=96)
    attention = 64 * 64 * 2 + 64 * 32 * 2
    sparse, dense = 8 * 3 * 64 * 32 + 64 * 8, 3 * 64 * 96
    assert moe.total_params == 4 * attention + 2 * sparse + 2 * dense + 2 * 1000 * 64
    assert moe.active_layer_params == 4 * attention + 2 * (2 * 3 * 64 * 32 + 64 * 8) + 2 * dense
    one_token = step_cost(moe, H200, [ChunkCost(1, 0, 0)])
    assert one_token.bytes == (moe.active_layer_params + 1000 * 64) * 2 + moe.kv_bytes_per_token


def test_an_ungated_mlp_has_two_matrices():
    plain = ModelShape("plain", num_layers=1, hidden=64, num_heads=4, num_kv_heads=4, head_dim=16, intermediate=256,
                       vocab=1, gated_mlp=False)
    assert plain.expert_params == 2 * 64 * 256
    assert step_flops(plain, [ChunkCost(1, 0, 0)]) == 2 * (4 * 64 * 64 + 2 * 64 * 256) + 4 * 4 * 16


@pytest.mark.parametrize("field, value", [("num_layers", 0), ("num_active_experts", 129)])
def test_a_bad_shape_names_its_field(field, value):
    fields = dict(THINKER.__dict__, **{field: value})
    with pytest.raises(ValueError, match=field):
        ModelShape(**fields)


def test_dense_layers_need_experts_and_a_width():
    with pytest.raises(ValueError, match="num_dense_layers"):
        ModelShape(**dict(DENSE.__dict__, num_dense_layers=1, dense_intermediate=64))
    with pytest.raises(ValueError, match="dense_intermediate"):
        ModelShape(**dict(THINKER.__dict__, num_dense_layers=1))
