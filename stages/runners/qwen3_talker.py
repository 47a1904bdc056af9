"""Runner of Qwen3-Omni's talker: input rows as the reference builds them, a first code per frame from the
talker, the frame's other codebooks from its code predictor."""

from __future__ import annotations

from typing import Any

import torch

from stages.models.qwen3_omni.talker_logits import talker_logits
from stages.plan import ScheduledChunk
from stages.requests.qwen3_talker import HEADER_PADS, Qwen3TalkerRequest
from stages.runners.decoder import DecoderRunner
from stages.sampling import sample


class Qwen3TalkerRunner(DecoderRunner):
    """A prompt position's row is the reference's talker input (user rows through the text or hidden
    projection; the reply prefix's text rows plus codec rows); a later position's is its frame's summed
    codebook embeddings plus its trailing text entry (see Qwen3TalkerRequest). First codes are drawn
    after the reference's logits processing (repetition penalty over the request's first codes, the
    suppressed codec ids); each that becomes a frame gets its other codebooks from the code predictor,
    conditioned on the talker's last hidden state, all of a step's frames in one batch."""

    def __init__(self, model: torch.nn.Module, kv, suppressed: list[int]) -> None:
        super().__init__(model, kv)
        self.suppressed = suppressed
        self.device, self.dtype = model.codec_head.weight.device, model.codec_head.weight.dtype
        with torch.inference_mode():
            self.tts = model.tts_rows()._asdict()

    def embeddings(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        return torch.cat([self._rows(chunk.request, chunk.start, chunk.end) for chunk in chunks])

    def _rows(self, request: Qwen3TalkerRequest, start: int, end: int) -> torch.Tensor:
        length = request.prompt_length
        prompt = self._prompt(request)[start:end] if start < length else None
        if end <= length:
            return prompt
        steps = range(max(start, length) - length, end - length)
        frames = torch.tensor([request.frames[k] for k in steps], dtype=torch.long, device=self.device)
        later = self.model.frame_embedding(frames) + self._trailing(request, steps)
        return later if prompt is None else torch.cat([prompt, later])

    def _trailing(self, request: Qwen3TalkerRequest, steps: range) -> torch.Tensor:
        """The trailing text rows of `steps`: fed rows projected together, the tts rows after them."""
        entries = [request.trailing(k) for k in steps]
        fed = [entry for entry in entries if not isinstance(entry, str)]
        projected = iter(self.model.project_text(torch.stack(fed).to(self.device, self.dtype)) if fed else ())
        return torch.stack([self.tts[entry] if isinstance(entry, str) else next(projected) for entry in entries])

    def _prompt(self, request: Qwen3TalkerRequest) -> torch.Tensor:
        """Every prompt row of `request` (recomputed for each chunk of it: prompts are prefilled in few)."""
        prompt, model, device, dtype = request.prompt, self.model, self.device, self.dtype
        width = model.config.decoder.hidden_size
        rows, audio = prompt.user_rows.to(device, dtype), prompt.user_is_audio.to(device)
        users = torch.empty(len(rows), width, device=device, dtype=dtype)
        if audio.any():
            users[audio] = model.project_hidden(rows[audio])
        if (~audio).any():
            users[~audio] = model.project_text(rows[~audio])
        header_and_first = model.project_text(torch.cat([prompt.header_rows, request.fed[0][None]]).to(device, dtype))
        text = torch.cat([header_and_first[:3], self.tts["pad"].expand(HEADER_PADS, -1), self.tts["bos"][None],
                          header_and_first[3:]])
        codec = model.codec_rows(request.codec_ids.prefix)
        codec = torch.cat([codec.new_zeros(3, width), codec])
        return torch.cat([users, text + codec])

    def logits(self, hidden: torch.Tensor, requests: list[Qwen3TalkerRequest]) -> torch.Tensor:
        logits = self.model.logits(hidden)
        for penalty in {r.sampling.repetition_penalty for r in requests}:
            rows = [i for i, r in enumerate(requests) if r.sampling.repetition_penalty == penalty]
            logits[rows] = talker_logits(logits[rows], [requests[i].code0s for i in rows], penalty, self.suppressed)
        return logits

    def sampled(self, chunks: list[ScheduledChunk], hidden: torch.Tensor) -> dict[str, Any]:
        first = super().sampled(chunks, hidden)
        rows, row = {}, 0
        for chunk in chunks:
            row += chunk.num_tokens
            rows[chunk.request.request_id] = row - 1
        voiced = [c.request for c in chunks if c.request.request_id in first
                  and c.request.needs_residuals(first[c.request.request_id])]
        frames = {r.request_id: None for r in voiced}
        if voiced:
            sampling, generators = [r.sampling for r in voiced], [r.generator for r in voiced]
            residuals = self.model.predict_residuals(
                hidden[[rows[r.request_id] for r in voiced]],
                torch.tensor([first[r.request_id] for r in voiced], device=self.device),
                lambda logits: torch.tensor(sample(logits, sampling, generators), device=self.device))
            frames = {r.request_id: [first[r.request_id], *codes] for r, codes in zip(voiced, residuals.tolist())}
        return {request_id: (code0, frames.get(request_id)) for request_id, code0 in first.items()}

    def result(self, request: Qwen3TalkerRequest, token: int, hidden: torch.Tensor) -> int:
        return token
