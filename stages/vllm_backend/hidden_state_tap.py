"""A KV connector that reads hidden states back out of vLLM, for the talker (imported by vLLM, by module path,
in a stage process that has vLLM).

vLLM's speculative method `extract_hidden_states` makes the model return the hidden states after the layers
`eagle_aux_hidden_state_layer_ids` names, and writes each computed position's into a cache-only attention
layer's KV (vllm/v1/spec_decode/extract_hidden_states.py). KV connectors see that cache: this one's scheduler
side tells its worker side, every step, which slots hold positions a request asked for (the positions in its
SamplingParams.extra_args[ROWS_ARG]) and were computed by the end of that step; after the step wrote them
(`wait_for_save`), the worker side copies their rows out, keyed by the LiveServe request the generation serves
(extra_args[OWNER_ARG]), until `take` hands them over. With the uni-process executor the worker is the stage's
own process, so the engine reads them where vLLM built the connector (vllm_api.take_rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata, SupportsHMA

from stages.vllm_backend.vllm_api import OWNER_ARG, ROWS_ARG


@dataclass(frozen=True)
class RowRead:
    owner: str
    positions: list[int]
    slots: list[int]


@dataclass
class TapMetadata(KVConnectorMetadata):
    reads: list[RowRead] = field(default_factory=list)


@dataclass
class _Wanted:
    owner: str
    positions: list[int]
    blocks: list[int]


class HiddenStateTap(KVConnectorBase_V1, SupportsHMA):
    """Stores nothing and loads nothing: it copies requested positions' hidden states out of the cache."""

    def __init__(self, vllm_config, role, kv_cache_config=None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._group = _hidden_state_group(kv_cache_config)
        self._block_size = kv_cache_config.kv_cache_groups[self._group].kv_cache_spec.block_size
        self._wanted: dict[str, _Wanted] = {}  # scheduler side, by vLLM request id
        self._cache: torch.Tensor | None = None  # worker side: [blocks, hidden states, block_size, hidden]
        self._rows: list[tuple[str, list[int], torch.Tensor]] = []

    def take(self) -> list[tuple[str, list[int], torch.Tensor]]:
        """The rows read since the last call: (LiveServe request id, positions, rows [n, layers, hidden])."""
        rows, self._rows = self._rows, []
        return rows

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        from vllm.config import get_layers_from_vllm_config
        from vllm.model_executor.models.extract_hidden_states import CacheOnlyAttentionLayer

        (name,) = get_layers_from_vllm_config(self._vllm_config, CacheOnlyAttentionLayer, list(kv_caches))
        self._cache = kv_caches[name]

    def wait_for_save(self) -> None:
        if not self.has_connector_metadata():
            return
        for read in self._get_connector_metadata().reads:
            slots = torch.tensor(read.slots, device=self._cache.device)
            rows = self._cache[slots // self._block_size, :, slots % self._block_size]
            self._rows.append((read.owner, read.positions, rows.to("cpu", copy=True)))

    def start_load_kv(self, forward_context, **kwargs) -> None:
        pass

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        pass

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int, bool]:
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        pass

    def build_connector_meta(self, scheduler_output) -> TapMetadata:
        computed: dict[str, int] = {}
        for new in scheduler_output.scheduled_new_reqs:
            extra = new.sampling_params.extra_args or {}
            if extra.get(ROWS_ARG):
                self._wanted[new.req_id] = _Wanted(extra[OWNER_ARG], sorted(extra[ROWS_ARG]),
                                                   list(new.block_ids[self._group]))
            computed[new.req_id] = new.num_computed_tokens
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            wanted = self._wanted.get(req_id)
            if wanted is not None and cached.new_block_ids[i] is not None:
                blocks = list(cached.new_block_ids[i][self._group])
                wanted.blocks = blocks if req_id in cached.resumed_req_ids else wanted.blocks + blocks
            computed[req_id] = cached.num_computed_tokens[i]
        return TapMetadata([read for req_id, start in computed.items()
                            if (read := self._due(req_id, start + scheduler_output.num_scheduled_tokens[req_id]))])

    def _due(self, req_id: str, end: int) -> RowRead | None:
        """The wanted positions of `req_id` below `end` (computed once the step is), no longer wanted after."""
        wanted = self._wanted.get(req_id)
        if wanted is None or not wanted.positions or wanted.positions[0] >= end:
            return None
        due = [p for p in wanted.positions if p < end]
        wanted.positions = wanted.positions[len(due):]
        slots = [wanted.blocks[p // self._block_size] * self._block_size + p % self._block_size for p in due]
        return RowRead(wanted.owner, due, slots)

    def request_finished_all_groups(self, request, block_ids) -> tuple[bool, None]:
        self._wanted.pop(request.request_id, None)
        return False, None

    def request_finished(self, request, block_ids) -> tuple[bool, None]:
        return self.request_finished_all_groups(request, block_ids)


def _hidden_state_group(kv_cache_config) -> int:
    """The KV cache group of the hidden-state layer: its own where its spec differs from the model's layers',
    the one group where it matches them (vLLM then groups them together)."""
    from vllm.v1.kv_cache_interface import HiddenStateCacheSpec

    groups = kv_cache_config.kv_cache_groups
    found = [i for i, group in enumerate(groups) if isinstance(group.kv_cache_spec, HiddenStateCacheSpec)]
    if len(found) == 1 or len(groups) == 1:
        return found[0] if found else 0
    raise ValueError(f"no single KV cache group holds the hidden-state layer among {len(groups)}")
