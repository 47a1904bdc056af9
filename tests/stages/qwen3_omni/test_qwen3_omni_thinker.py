"""The native thinker over paged KV against transformers' reference thinker, on tiny random models of two shapes."""

import pytest
import torch

from stages.models.qwen3_omni.config import Qwen3OmniConfig
from stages.models.qwen3_omni.moe_decoder import RotaryAngles
from stages.models.qwen3_omni.thinker import Qwen3OmniThinker
from tests.stages.qwen3_omni.paged_steps import PagedSteps

PROMPTS = {"a": [5, 17, 42, 8, 99, 3, 250, 61, 7, 12, 140], "b": [1, 2, 3, 4, 5, 6, 90]}
FIRST_CHUNK = 5  # each prompt is prefilled in two chunks: its first 5 tokens, then the rest
NUM_DECODES = 6


def generate_paged(thinker: Qwen3OmniThinker, steps: PagedSteps, accept: int):
    """Both prompts prefilled in two chunks, then decoded together greedily; per prompt the generated tokens and
    every row's logits and accept-layer hidden, in position order."""
    tokens = {seq: list(prompt) for seq, prompt in PROMPTS.items()}
    logits, captured = {seq: [] for seq in PROMPTS}, {seq: [] for seq in PROMPTS}
    chunks = [{seq: p[:FIRST_CHUNK] for seq, p in PROMPTS.items()},
              {seq: p[FIRST_CHUNK:] for seq, p in PROMPTS.items()}]
    for step in range(2 + NUM_DECODES):
        ids = chunks[step] if step < 2 else {seq: t[-1:] for seq, t in tokens.items()}
        out = steps.step({seq: thinker.embed(torch.tensor(i)) for seq, i in ids.items()}, capture_layer=accept)
        for seq, (hidden, kept) in out.items():
            logits[seq].append(thinker.logits(hidden))
            captured[seq].append(kept)
            if step >= 1:
                tokens[seq].append(int(logits[seq][-1][-1].argmax()))
    return tokens, *({seq: torch.cat(rows) for seq, rows in by_seq.items()} for by_seq in (logits, captured))


@pytest.mark.parametrize("c_kernels", [False, True], ids=["torch_ops", "c_kernels"])
def test_thinker_over_paged_kv_equals_the_reference(tiny, c_kernels):
    accept = Qwen3OmniConfig.from_folder(tiny.folder).talker.accept_hidden_layer
    thinker = Qwen3OmniThinker.from_folder(tiny.folder)
    tokens, logits, captured = generate_paged(thinker, PagedSteps(thinker, c_kernels), accept)
    reference = tiny.reference.thinker
    for seq, prompt in PROMPTS.items():
        generated = reference.generate(input_ids=torch.tensor([prompt]), do_sample=False,
                                       max_new_tokens=NUM_DECODES + 1)
        assert tokens[seq] == generated[0].tolist(), seq  # greedy ids equal generate's
        with torch.no_grad():  # the reference over every position the native thinker computed
            out = reference(input_ids=torch.tensor([tokens[seq][:-1]]), output_hidden_states=True)
        torch.testing.assert_close(logits[seq], out.logits[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(captured[seq], out.hidden_states[accept][0], atol=1e-4, rtol=0)
        assert len(set(tokens[seq][len(prompt):])) > 1  # the comparison is not trivially constant


def test_capture_layer_follows_the_references_hidden_states_indexing(tiny):
    thinker = Qwen3OmniThinker.from_folder(tiny.folder)
    num_layers = thinker.config.num_layers
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        reference = tiny.reference.thinker(input_ids=ids, output_hidden_states=True).hidden_states
    assert len(reference) == num_layers + 1  # index 0 the embeddings, index num_layers the final-normed output
    for layer in (0, num_layers - 1, num_layers):
        steps = PagedSteps(thinker, c_kernels=False)
        hidden, kept = steps.step({"s": thinker.embed(ids[0])}, capture_layer=layer)["s"]
        torch.testing.assert_close(kept, reference[layer][0], atol=1e-5, rtol=0)
        torch.testing.assert_close(hidden, reference[-1][0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="capture_layer"):
        PagedSteps(thinker, c_kernels=False).step({"s": thinker.embed(ids[0])}, capture_layer=num_layers + 1)


def test_rotary_angles_are_the_references_bit_for_bit_at_long_positions(tiny):
    # float64 angles (llama.py's tables) differ from the reference's float32 ones by ~3e-4 at position 65535
    config = Qwen3OmniConfig.from_folder(tiny.folder).thinker
    positions = torch.tensor([0, 1, 17, 4097, 30000, 65535])
    rotary = tiny.reference.thinker.model.rotary_emb
    cos, sin = rotary(torch.zeros(1), positions[None, None].expand(3, 1, -1))
    native = RotaryAngles(config.head_dim, config.rope_theta).tables(positions, torch.zeros(1))
    assert torch.equal(native[0][:, 0], cos[0]) and torch.equal(native[1][:, 0], sin[0])
