"""The thinker on vLLM refuses a turn constrained to a tool call (the native thinker constrains them; this
backend does not yet): the turn fails with a clear error before vLLM sees it, and the session goes on."""

from __future__ import annotations

from stages.commands import AddRequest, AppendInput
from stages.config import SamplingParams
from stages.requests.thinker import ThinkerRequest, TurnInput
from stages.vllm_backend.engine import VllmThinkerEngine
from tests.stages.tool_call_schemas import FORCED


def test_a_constrained_turn_is_refused_before_vllm_sees_it():
    engine = VllmThinkerEngine("thinker", engine=None, emit=lambda outputs: None)  # any vLLM call would fail
    turn = TurnInput([1, 2, 3], sampling=SamplingParams(temperature=0.0), constraint=FORCED)
    engine.submit_all([AddRequest(ThinkerRequest("s", 0.0, frozenset({2}), 64)), AppendInput("s", turn)])
    refused = [(o.request_id, o.error) for o in engine.step()]
    assert refused == [("s", "stage thinker (vllm) does not constrain tool calls yet")]
    assert engine.requests["s"].num_known == 0 and not engine.requests["s"].is_generating
