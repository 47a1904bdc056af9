"""Qwen3-Omni's native thinker constrains tool calls as ThinkerRunner does (its runner inherits the logits hook and
gets the folder tokenizer's compiler): a forced call from random weights is a valid call."""

import time

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from liveserve.config.document import override_argument
from liveserve.config.loader import load_config
from stages.commands import AddRequest, AppendInput
from stages.config import SamplingParams
from stages.factory import build_engine, thinker_text
from stages.requests.thinker import ThinkerRequest, TurnInput
from tests.stages.tool_call_schemas import FORCED, assert_valid_call


def test_qwen3_omni_thinker_makes_a_forced_call_valid(tmp_path):
    folder = write_tiny_folder(tmp_path, SHAPES["tiny-a"], 0)  # with a tokenizer, as a served folder has
    spec = load_config("qwen3-omni-tiny-cpu", [override_argument(f"model.folder={folder}")]).pipeline.thinker
    engine, tokenizer = build_engine(spec, lambda outputs: None, time.monotonic), thinker_text(spec)[0]
    question = tokenizer.encode("<|im_start|>user\nWeather in Rome?<|im_end|>\n<|im_start|>assistant\n")
    turn = TurnInput(question, sampling=SamplingParams(temperature=1.0, max_tokens=100, seed=1), constraint=FORCED)
    engine.submit_all([AddRequest(ThinkerRequest("s", 0.0, tokenizer.stop_ids, 1024)), AppendInput("s", turn)])
    tokens: list[int] = []
    while not tokens or tokens[-1] not in tokenizer.stop_ids:
        for output in engine.step():
            assert output.error is None and output.payload.finish_reason in (None, "stop"), output
            tokens.append(output.payload.token_id)
    assert_valid_call(tokenizer.decode(tokens[:-1]))
