"""Whether a model's own chat template lays a conversation out in ChatML, as LiveServe's context does, and the
system message it adds to a conversation without one."""

from __future__ import annotations

SYSTEM, USER, ASSISTANT = "<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"


def chatml_default_instructions(template: str) -> str:
    """The system message `template` (a Jinja chat template) adds when a conversation has none ("": none);
    ValueError unless it renders ChatML."""
    layout = _render(template, [("system", "S"), ("user", "U")])
    if layout != f"{SYSTEM}S<|im_end|>\n{USER}U<|im_end|>\n{ASSISTANT}":
        raise ValueError(f"the chat template is not ChatML (it renders {layout[:80]!r})")
    alone = _render(template, [("user", "U")])
    system = alone.removesuffix(f"{USER}U<|im_end|>\n{ASSISTANT}")
    return system.removeprefix(SYSTEM).removesuffix("<|im_end|>\n") if system.startswith(SYSTEM) else ""


def _render(template: str, messages: list[tuple[str, str]]) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(template).render(
        messages=[{"role": role, "content": content} for role, content in messages], add_generation_prompt=True)
