"""The native talker (MoE body over paged KV, codec head, logits processing, code predictor, frame embeddings)
against transformers' reference talker, on tiny random models of two shapes."""

import pytest
import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor, SuppressTokensLogitsProcessor

from stages.models.qwen3_omni.talker import Qwen3OmniTalker
from stages.models.qwen3_omni.talker_logits import suppressed_codec_ids, talker_logits
from tests.stages.qwen3_omni.paged_steps import PagedSteps
from tests.stages.qwen3_omni.tiny_reference import TOKENS

PENALTY = 1.05
NUM_TOKENS = 7  # code-0 tokens per sequence: the last one's residuals are never predicted (as in the reference)
PREFIX_LENGTHS = {"x": 9, "y": 6}  # prefilled in two chunks each


def talker_inputs(hidden_size: int, seed: int = 3) -> dict[str, tuple]:
    """Per sequence: its prefix, trailing text rows (fewer than its steps: the pad row takes over) and pad row."""
    gen = torch.Generator().manual_seed(seed)
    rows = lambda n: 0.5 * torch.randn(n, hidden_size, generator=gen)  # noqa: E731
    return {seq: (rows(n), rows(3), rows(1)[0]) for seq, n in PREFIX_LENGTHS.items()}


def generate_native(talker: Qwen3OmniTalker, inputs: dict[str, tuple], c_kernels: bool):
    """Greedy generation of both sequences together, as the reference generates each: per sequence its code-0
    ids, frames [code 0, residuals], raw logits and input embeddings of every decode step."""
    steps, suppressed = PagedSteps(talker, c_kernels), suppressed_codec_ids(talker.config)
    out = steps.step({seq: prefix[:4] for seq, (prefix, _, _) in inputs.items()})
    out = steps.step({seq: prefix[4:] for seq, (prefix, _, _) in inputs.items()})
    result = {seq: {"code0": [], "frames": [], "logits": [], "embeds": []} for seq in inputs}
    for step in range(NUM_TOKENS):
        seqs = sorted(out)
        last = torch.cat([out[seq][0][-1:] for seq in seqs])
        logits = talker.logits(last)
        processed = talker_logits(logits, [result[seq]["code0"] for seq in seqs], PENALTY, suppressed)
        code0 = processed.argmax(dim=-1)
        for i, seq in enumerate(seqs):
            result[seq]["logits"].append(logits[i])
            result[seq]["code0"].append(int(code0[i]))
        if step == NUM_TOKENS - 1:
            return result
        frames = torch.cat([code0[:, None], talker.predict_residuals(last, code0)], dim=1)
        embeds = talker.frame_embedding(frames)
        for i, seq in enumerate(seqs):
            _, trailing, pad = inputs[seq]
            embeds[i] += trailing[step] if step < len(trailing) else pad
            result[seq]["frames"].append(frames[i].tolist())
            result[seq]["embeds"].append(embeds[i])
        out = steps.step({seq: embeds[i : i + 1] for i, seq in enumerate(seqs)})


def generate_reference(reference, prefix: torch.Tensor, trailing: torch.Tensor, pad: torch.Tensor):
    """The reference talker's generate as Qwen3OmniMoeForConditionalGeneration.generate calls it, greedy; with
    the inputs_embeds its model got at every step."""
    seen = []
    hook = reference.talker.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["inputs_embeds"][0, -1]), with_kwargs=True)
    try:
        result = reference.talker.generate(
            inputs_embeds=prefix[None], trailing_text_hidden=trailing[None], tts_pad_embed=pad[None, None],
            talker_input_ids=torch.full((1, len(prefix)), TOKENS["tts_pad_token_id"]),
            attention_mask=torch.ones(1, len(prefix), dtype=torch.long), max_new_tokens=NUM_TOKENS, do_sample=False,
            repetition_penalty=PENALTY, suppress_tokens=suppressed_codec_ids_of(reference), eos_token_id=1064,
            output_hidden_states=True, output_logits=True, return_dict_in_generate=True)
    finally:
        hook.remove()
    frames = [hid[-1][0].tolist() for hid in result.hidden_states if hid[-1] is not None]
    return result.sequences[0].tolist(), frames, torch.cat(result.logits), seen[1:]


def suppressed_codec_ids_of(reference) -> list[int]:
    config = reference.config.talker_config
    vocab = config.text_config.vocab_size
    return [i for i in range(vocab - 1024, vocab) if i != config.codec_eos_token_id]


@pytest.mark.filterwarnings("ignore:Passing `repetition_penalty`")  # as intended: generated tokens only
@pytest.mark.parametrize("c_kernels", [False, True], ids=["torch_ops", "c_kernels"])
def test_talker_greedy_generation_equals_the_reference(tiny, c_kernels):
    talker = Qwen3OmniTalker.from_folder(tiny.folder)
    inputs = talker_inputs(talker.config.decoder.hidden_size)
    with torch.inference_mode():
        native = generate_native(talker, inputs, c_kernels)
    for seq, (prefix, trailing, pad) in inputs.items():
        code0, frames, logits, embeds = generate_reference(tiny.reference, prefix, trailing, pad)
        assert native[seq]["code0"][: len(code0)] == code0, seq
        assert native[seq]["frames"][: len(frames)] == frames, seq  # residual codes: the code predictor's
        torch.testing.assert_close(torch.stack(native[seq]["logits"][: len(code0)]), logits, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.stack(native[seq]["embeds"][: len(embeds)]), torch.stack(embeds),
                                   atol=1e-5, rtol=0)  # frame_embedding + text row == the reference's step input
        assert len(code0) > 3 and len({f[1] for f in frames}) > 1  # not a trivially short or constant run


def test_predict_residuals_equals_the_code_predictors_greedy_generate_for_a_batch(tiny):
    talker = Qwen3OmniTalker.from_folder(tiny.folder)
    hidden_size, groups = talker.config.decoder.hidden_size, talker.config.num_code_groups
    gen = torch.Generator().manual_seed(5)
    past_hidden, code0 = torch.randn(3, hidden_size, generator=gen), torch.tensor([3, 17, 60])
    reference = tiny.reference.talker
    with torch.no_grad():
        embeds = torch.stack([past_hidden, reference.get_input_embeddings()(code0)], dim=1)
        expected = reference.code_predictor.generate(inputs_embeds=embeds, max_new_tokens=groups - 1, do_sample=False)
    assert talker.predict_residuals(past_hidden, code0).tolist() == expected.tolist()
    first = talker.predict_residuals(past_hidden, code0, sample=lambda logits: logits.argmin(dim=-1))[:, 0]
    with torch.no_grad():
        lowest = reference.code_predictor(inputs_embeds=embeds).logits[:, -1].argmin(dim=-1)
    assert first.tolist() == lowest.tolist()  # `sample` picks the codes


def test_tts_and_codec_rows_are_the_references(tiny):
    talker = Qwen3OmniTalker.from_folder(tiny.folder)
    reference = tiny.reference
    ids = torch.tensor([[TOKENS["tts_bos_token_id"], TOKENS["tts_eos_token_id"], TOKENS["tts_pad_token_id"]]])
    with torch.no_grad():
        expected = reference.talker.text_projection(reference.thinker.get_input_embeddings()(ids))[0]
        codec = reference.talker.get_input_embeddings()(torch.tensor([1065, 1069]))
    torch.testing.assert_close(torch.stack(talker.tts_rows()), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(talker.codec_rows([1065, 1069]), codec, atol=0, rtol=0)
    rows = torch.randn(4, talker.config.thinker_hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(talker.project_hidden(rows), reference.talker.hidden_projection(rows),
                                   atol=1e-6, rtol=0)


def test_talker_logits_equal_hfs_processors():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 40, generator=gen)
    histories = [[4, 9, 4, 30], [7, 7, 2, 11], [0, 39, 5, 5]]  # repeated ids, both ends of the vocabulary
    suppressed = [20, 21, 39]
    expected = RepetitionPenaltyLogitsProcessor(PENALTY)(torch.tensor(histories), logits.clone())
    expected = SuppressTokensLogitsProcessor(suppressed)(torch.tensor(histories), expected)
    torch.testing.assert_close(talker_logits(logits, histories, PENALTY, suppressed), expected, atol=0, rtol=0)
    uneven = talker_logits(logits, [[], [7], [0, 39, 5, 5]], PENALTY, [])
    assert torch.equal(uneven[0], logits[0])  # no history: untouched
    alone = RepetitionPenaltyLogitsProcessor(PENALTY)(torch.tensor([[7]]), logits[1:2].clone())
    assert torch.equal(uneven[1], alone[0])


def test_suppressed_codec_ids_are_the_top_1024_but_eos(tiny):
    talker = Qwen3OmniTalker.from_folder(tiny.folder)
    assert suppressed_codec_ids(talker.config) == suppressed_codec_ids_of(tiny.reference)
