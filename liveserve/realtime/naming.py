"""Event and item shapes that differ between the GA protocol and the beta one."""

from __future__ import annotations

from orchestrator.interaction.ids import new_id

BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
GA_ONLY = {"conversation.item.done"}
__all__ = ["BETA_NAMES", "GA_ONLY", "Dialect", "message_item", "new_id"]

class Dialect:
    """Renames GA events for beta clients (`OpenAI-Beta: realtime=v1`) and drops GA-only ones."""

    def __init__(self, is_beta: bool) -> None:
        self.is_beta = is_beta

    def name(self, ga_name: str) -> str | None:
        if not self.is_beta:
            return ga_name
        return None if ga_name in GA_ONLY else BETA_NAMES.get(ga_name, ga_name)

    def content_type(self, kind: str) -> str:
        """kind: input_audio | input_text | output_audio | output_text."""
        if self.is_beta:
            return {"output_audio": "audio", "output_text": "text"}.get(kind, kind)
        return kind


def message_item(item_id: str, role: str, content: list[dict], status: str = "completed") -> dict:
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": role, "status": status,
            "content": content}
