"""Steps of a native Qwen3-Omni decoder over a kvtier pool, laid out as DecoderRunner lays a step out."""

from __future__ import annotations

import torch

from kvtier import KVCacheManager, KVPoolConfig, blocks_for
from stages.models.attention_batch import build_attention_batch
from stages.models.kernels import layer_ops, paged_decode
from stages.models.llama import use_layer_ops


class PagedSteps:
    """Runs `model` one step at a time over its own KV pool. With `c_kernels`, the model computes as
    DecoderRunner has it compute on the CPU in float32: C layer ops and the paged decode kernel."""

    def __init__(self, model: torch.nn.Module, c_kernels: bool, num_blocks: int = 64, block_size: int = 4) -> None:
        decoder = getattr(model.config, "decoder", model.config)
        self.model, self.block_size = model, block_size
        self.group = decoder.num_heads // decoder.num_kv_heads
        self.kv = KVCacheManager(KVPoolConfig(num_blocks=num_blocks, num_layers=decoder.num_layers,
                                              num_kv_heads=decoder.num_kv_heads, head_dim=decoder.head_dim,
                                              block_size=block_size))
        self.kv_layers = [self.kv.cache.layer(i) for i in range(decoder.num_layers)]
        self.kernel = paged_decode.load() if c_kernels else None
        if c_kernels:
            use_layer_ops(model, layer_ops.load())
        self.lengths: dict[str, int] = {}

    @torch.inference_mode()
    def step(self, inputs: dict[str, torch.Tensor], capture_layer: int | None = None) -> dict[str, tuple]:
        """inputs: each sequence's next embedding rows. Returns each sequence's (final-normed hidden rows,
        captured rows or None). Single rows decode, longer ones are prefill chunks; decodes come first."""
        order = sorted(inputs, key=lambda seq: (len(inputs[seq]) != 1, self.lengths.get(seq, 0) + len(inputs[seq])))
        decodes, prefills, slots, positions = [], [], [], []
        for seq in order:
            start = self.lengths.get(seq, 0)
            count, end = len(inputs[seq]), start + len(inputs[seq])
            self.kv.reserve(seq, end)
            blocks = self.kv.table(seq).block_ids[: blocks_for(end, self.block_size)]
            slots += self.kv.slot_ids(seq, start, end)
            positions += range(start, end)
            (decodes.append((blocks, end)) if count == 1 else prefills.append((blocks, count, end)))
            self.lengths[seq] = end
        batch = build_attention_batch(self.block_size, decodes, prefills, slots, self.group, decode_kernel=self.kernel)
        embeds = torch.cat([inputs[seq] for seq in order])
        out = self.model(embeds, torch.tensor(positions), self.kv_layers, batch, capture_layer=capture_layer)
        hidden, captured = out if capture_layer is not None else (out, None)
        sizes = [len(inputs[seq]) for seq in order]
        captured_rows = captured.split(sizes) if captured is not None else [None] * len(order)
        return {seq: (rows, kept) for seq, rows, kept in zip(order, hidden.split(sizes), captured_rows)}
