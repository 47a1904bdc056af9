"""A Piper voice's HiFi-GAN decoder in torch, so that it can compute in bfloat16.

A Piper voice is one ONNX graph: VITS's text encoder, duration predictor and flow turn phoneme ids into
latent frames, and its HiFi-GAN decoder (the `dec.*` weights) turns those into the waveform, ~3/4 of a
segment's time on onnxruntime's float32 kernels. `SplitVoiceSession` runs the graph up to the decoder's
input on onnxruntime and the decoder in torch, where bfloat16 convolutions on channels-last activations
take ~60 % less time on a CPU with AVX-512 bf16 (one thread here: 330-400 against 110-130 ms for 6 s
of speech). The frames are padded to a few lengths, and every convolution's output is zeroed past the
input's own length, so the padding changes no sample. The decoder is read from the graph itself (its
convolutions' weights, strides, paddings and dilations), so any Piper voice of this architecture loads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

DECODER_INPUT_NODE = "/dec/conv_pre/Conv"
RESBLOCK_SLOPE = 0.1  # HiFi-GAN's leaky ReLU inside the decoder; 0.01 before its last convolution
OUTPUT_SLOPE = 0.01
FRAME_BUCKET = 32  # latent frames are padded to a multiple of this (~0.37 s of audio): oneDNN builds its kernels
                   # per shape (~60 ms a new length), and with few lengths it builds each once


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
    and tanh. `__call__` maps latent frames [1, channels, frames] (float32) to audio [samples] (float32)."""

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

    def __call__(self, latent: torch.Tensor) -> torch.Tensor:
        frames = latent.shape[-1]
        padded = -(-frames // FRAME_BUCKET) * FRAME_BUCKET
        x = F.pad(latent.to(self.dtype), (0, padded - frames)).unsqueeze(2).contiguous(
            memory_format=torch.channels_last)
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


def _count(weights: Mapping[str, np.ndarray], prefix: str) -> int:
    return len({name[len(prefix):].split(".")[0] for name in weights if name.startswith(prefix)})


def _array(initializer: object) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(initializer)


def _attributes(node: object) -> dict[str, object]:
    from onnx import helper

    return {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}
