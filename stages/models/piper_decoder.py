"""A Piper voice's HiFi-GAN decoder in torch, so that it can compute in bfloat16.

A Piper voice is one ONNX graph: VITS's text encoder, duration predictor and flow turn phoneme ids into latent
frames, and its HiFi-GAN decoder (the `dec.*` weights) turns those into the waveform, ~3/4 of a segment's time
on onnxruntime's float32 kernels. `SplitVoiceSession` runs the graph up to the decoder's input on onnxruntime
and the decoder in torch, where bfloat16 convolutions on channels-last activations are much cheaper on a CPU
with AVX-512 bf16 (benchmarks/log/2026-11-30-tts-decoder.md). It decodes windows of a fixed length, each with
the frames its audio depends on either side (the receptive field, from the graph), every convolution's output
zeroed past the latent's end as the graph's padding is: the audio is the graph's. oneDNN builds its kernels
per shape, so a handful of shapes keeps that cost and its memory bounded: a call per whole segment would meet
a new length, and hold more memory, at nearly every segment. The decoder is read from the graph itself (its
convolutions' weights, strides, paddings and dilations), so any Piper voice of this architecture loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

DECODER_INPUT_NODE = "/dec/conv_pre/Conv"
RESBLOCK_SLOPE = 0.1  # HiFi-GAN's leaky ReLU inside the decoder; 0.01 before its last convolution
OUTPUT_SLOPE = 0.01
WINDOW_FRAMES = 128  # latent frames decoded a call (~1.5 s of audio), with the receptive field's frames either side
TAIL_FRAMES = 32  # a segment's last window is cut to a multiple of this: a few shapes in all, and little padding


class DecoderConv:
    """One convolution of the graph (transposed or not) as 2-D over a [batch, channels, 1, time] tensor."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, attributes: Mapping[str, Sequence[int]],
                 dtype: torch.dtype, transposed: bool = False) -> None:
        self.weight = torch.from_numpy(weight.copy()).to(dtype).unsqueeze(2).contiguous(
            memory_format=torch.channels_last)
        self.bias = None if bias is None else torch.from_numpy(bias.copy()).to(dtype)
        self.transposed = transposed
        self.stride = (1, attributes.get("strides", [1])[0])
        self.padding = (0, attributes["pads"][0])
        self.dilation = (1, attributes.get("dilations", [1])[0])

    def valid_length(self, length: int) -> int:
        """The output's length in the graph for an input of `length` (transposed: upsampled)."""
        if not self.transposed:
            return length
        kernel = self.weight.shape[-1]
        return (length - 1) * self.stride[1] - 2 * self.padding[1] + self.dilation[1] * (kernel - 1) + 1

    def __call__(self, x: torch.Tensor, valid: int) -> torch.Tensor:
        """The convolution of `x`, whose first `valid` positions are the input and the rest zeros; the
        output is zero past its own valid length, as the graph's next convolution pads it."""
        if self.transposed:
            y = F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, dilation=self.dilation)
        else:
            y = F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)
        y[..., self.valid_length(valid):] = 0
        return y


class HifiGanDecoder:
    """Piper's decoder: conv_pre, then per upsampling a transposed convolution and the mean of its
    residual blocks (each a chain of leaky ReLU -> dilated convolution -> residual add), then conv_post
    and tanh. `__call__` maps latent frames [1, channels, frames] (float32) to audio [samples] (float32),
    window by window."""

    def __init__(self, graph: object, dtype: torch.dtype) -> None:
        weights = {init.name: _array(init) for init in graph.initializer if init.name.startswith("dec.")}
        attributes = {node.name: _attributes(node) for node in graph.node if node.name.startswith("/dec/")}

        def conv(name: str, transposed: bool = False) -> DecoderConv:
            node = "/dec/{}/{}".format(name.replace(".convs.", "/convs."), "ConvTranspose" if transposed else "Conv")
            return DecoderConv(weights[f"dec.{name}.weight"], weights.get(f"dec.{name}.bias"),
                               attributes[node], dtype, transposed)

        self.dtype = dtype
        self.conv_pre, self.conv_post = conv("conv_pre"), conv("conv_post")
        self.ups = [conv(f"ups.{i}", transposed=True) for i in range(_count(weights, "dec.ups."))]
        blocks = _count(weights, "dec.resblocks.")
        self.blocks_per_up = blocks // len(self.ups)
        self.resblocks = [
            [conv(f"resblocks.{r}.convs.{c}") for c in range(_count(weights, f"dec.resblocks.{r}.convs."))]
            for r in range(blocks)]
        self.samples_per_frame = math.prod(up.stride[1] for up in self.ups)
        self.context_frames = self._receptive_radius()

    def _receptive_radius(self) -> int:
        """How many latent frames either side of a frame its audio depends on (12 for joe-medium)."""
        radius, scale = _radius(self.conv_pre), 1
        for i, up in enumerate(self.ups):
            radius += math.ceil(up.weight.shape[-1] / up.stride[1]) / scale
            scale *= up.stride[1]
            blocks = self.resblocks[i * self.blocks_per_up:(i + 1) * self.blocks_per_up]
            radius += max(sum(_radius(conv) for conv in convs) for convs in blocks) / scale
        return math.ceil(radius + _radius(self.conv_post) / scale)

    def __call__(self, latent: torch.Tensor) -> torch.Tensor:
        frames = latent.shape[-1]
        x = latent.to(self.dtype)
        context, pieces = self.context_frames, []
        for start in range(0, frames, WINDOW_FRAMES):
            low, high = max(0, start - context), min(frames, start + WINDOW_FRAMES + context)
            width = min(WINDOW_FRAMES + 2 * context, -(-(high - low) // TAIL_FRAMES) * TAIL_FRAMES)
            audio = self._window(F.pad(x[..., low:high], (0, width - (high - low))), high - low)
            first = (start - low) * self.samples_per_frame
            pieces.append(audio[first:first + min(WINDOW_FRAMES, frames - start) * self.samples_per_frame])
        return torch.cat(pieces)

    def _window(self, latent: torch.Tensor, frames: int) -> torch.Tensor:
        x = latent.unsqueeze(2).contiguous(memory_format=torch.channels_last)
        x, valid = self.conv_pre(x, frames), frames
        for i, up in enumerate(self.ups):
            x, valid = up(F.leaky_relu(x, RESBLOCK_SLOPE), valid), up.valid_length(valid)
            blocks = self.resblocks[i * self.blocks_per_up:(i + 1) * self.blocks_per_up]
            x = sum(_residual_chain(x, convs, valid) for convs in blocks) / self.blocks_per_up
        x = self.conv_post(F.leaky_relu(x, OUTPUT_SLOPE), valid)
        return torch.tanh(x.float()).reshape(-1)[:valid]


class SplitVoiceSession:
    """Stands in for a Piper voice's `onnxruntime.InferenceSession` (PiperVoice calls `run(None, feeds)`
    only): onnxruntime computes the latent frames, `HifiGanDecoder` the audio, returned as the graph's
    own output [1, 1, 1, samples]."""

    def __init__(self, front: object, decoder: HifiGanDecoder) -> None:
        self.front = front
        self.decoder = decoder

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        latent = self.front.run(None, feeds)[0]
        with torch.inference_mode():
            audio = self.decoder(torch.from_numpy(latent))
        return [audio.numpy().reshape(1, 1, 1, -1)]


def split_voice(model: object, dtype: torch.dtype) -> tuple[bytes, HifiGanDecoder]:
    """The voice's graph (an `onnx.ModelProto`) up to the decoder's input, serialized for onnxruntime,
    and its decoder computing in `dtype`."""
    from onnx.utils import Extractor

    latent = next(node.input[0] for node in model.graph.node if node.name == DECODER_INPUT_NODE)
    inputs = [value.name for value in model.graph.input]
    front = Extractor(model).extract_model(inputs, [latent])
    return front.SerializeToString(), HifiGanDecoder(model.graph, dtype)


def _residual_chain(x: torch.Tensor, convs: list[DecoderConv], valid: int) -> torch.Tensor:
    for conv in convs:
        x = x + conv(F.leaky_relu(x, RESBLOCK_SLOPE), valid)
    return x


def _radius(conv: DecoderConv) -> int:
    """The input positions either side of an output position of a stride-1 convolution."""
    return conv.dilation[1] * (conv.weight.shape[-1] - 1) // 2


def _count(weights: Mapping[str, np.ndarray], prefix: str) -> int:
    return len({name[len(prefix):].split(".")[0] for name in weights if name.startswith(prefix)})


def _array(initializer: object) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(initializer)


def _attributes(node: object) -> dict[str, object]:
    from onnx import helper

    return {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}
