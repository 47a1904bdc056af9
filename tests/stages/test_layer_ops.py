"""The decoder layers' element-wise steps in C against their torch formulas, on the layouts a layer hands
them (columns of a fused projection), at decode's few rows and a prefill's many (shared among threads)."""

import pytest
import torch

from kvtier import KVCacheManager, KVPoolConfig
from stages.models.decoder_config import DecoderConfig
from stages.models.kernels import build, layer_ops
from stages.models.kernels.layer_ops import TORCH_OPS, CLayerOps
from stages.models.llama import LlamaForCausalLM, RotaryEmbedding
from stages.runners.decoder import ThinkerRunner

ROWS = [3, 300]  # a decode step's rows; a prefill's, past the count that wakes the threads


@pytest.fixture
def ops():
    loaded = layer_ops.load()
    if not isinstance(loaded, CLayerOps):
        pytest.skip("no C compiler: layers compute with torch ops")
    return loaded


def fused_output(rows: int, widths: list[int], seed: int) -> list[torch.Tensor]:
    """Column views of one [rows, sum(widths)] tensor, as a fused projection splits its output."""
    out = 3 * torch.randn(rows, sum(widths), generator=torch.Generator().manual_seed(seed))
    return list(out.split(widths, dim=-1))


@pytest.mark.parametrize("rows", ROWS)
def test_rms_norm_equals_torch_on_strided_rows(rows, ops):
    x, _ = fused_output(rows, [384, 256], seed=rows)
    weight = torch.randn(384, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(ops.rms_norm(x, weight, 1e-5), TORCH_OPS.rms_norm(x, weight, 1e-5))


@pytest.mark.parametrize("rows", ROWS)
def test_rotation_equals_torch_on_the_query_and_key_columns_of_a_fused_projection(rows, ops):
    q, k, _ = fused_output(rows, [6 * 64, 2 * 64, 2 * 64], seed=rows)
    q, k = q.reshape(rows, 6, 64), k.reshape(rows, 2, 64)
    cos, sin = RotaryEmbedding(64, 4096, 10000.0).tables(torch.randint(0, 4096, (rows,)))
    expected = [TORCH_OPS.rotate(x, cos, sin) for x in (q, k)]
    for x, want in zip((q, k), expected):
        torch.testing.assert_close(ops.rotate(x, cos, sin), want)


@pytest.mark.parametrize("rows", ROWS)
def test_silu_product_equals_torch_far_into_both_tails(rows, ops):
    gate, up = fused_output(rows, [1024, 1024], seed=rows)
    gate[0, :4] = torch.tensor([-200.0, -90.0, 90.0, 200.0])  # past the exponent's clamp on either side
    torch.testing.assert_close(ops.silu_mul(gate, up), TORCH_OPS.silu_mul(gate, up))


def test_the_threads_share_rows_with_the_same_result(ops):
    x, gate, up = fused_output(400, [384, 1024, 1024], seed=5)
    weight = torch.randn(384)
    threads, outs = torch.get_num_threads(), []
    try:
        for count in (1, 2, 4):
            torch.set_num_threads(count)
            outs.append((ops.rms_norm(x, weight, 1e-6), ops.silu_mul(gate, up)))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for out in outs[1:] for a, b in zip(out, outs[0]))


def test_a_rotation_needs_one_angle_row_per_row(ops):
    q = torch.randn(4, 2, 8)
    cos, sin = RotaryEmbedding(8, 16, 10000.0).tables(torch.arange(3))
    with pytest.raises(ValueError, match=r"\[4, 1, 8\]"):
        ops.rotate(q, cos, sin)


def test_the_c_ops_refuse_other_floats(ops):
    with pytest.raises(TypeError, match="float32"):
        ops.rms_norm(torch.ones(2, 8, dtype=torch.float64), torch.ones(8, dtype=torch.float64), 1e-5)


def test_without_a_compiler_layers_compute_with_torch_ops(monkeypatch, caplog):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    assert layer_ops.load.__wrapped__() is TORCH_OPS
    assert "torch ops" in caplog.text


def test_a_runner_on_the_cpu_in_float32_gives_its_model_the_c_ops(ops):
    config = DecoderConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                           num_kv_heads=2, head_dim=8, max_position=64)
    model = LlamaForCausalLM(config)
    kv = KVCacheManager(KVPoolConfig(num_blocks=4, block_size=4, num_layers=2, num_kv_heads=2, head_dim=8))
    ThinkerRunner(model, kv)
    layer = model.model.layers[0]
    assert layer.input_layernorm.ops is layer.self_attn.ops is layer.mlp.ops is model.model.norm.ops is ops
