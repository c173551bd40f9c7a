"""Real models as PyTorch's exporter writes them: torchvision classifiers, ViT, a BERT-base encoder, a
GPT-2 style decoder block, and ResNet-50 quantized to int8 (QDQ, onnxruntime's quantize_static).

Random weights (nothing is downloaded), batch 1, float32, `torch.onnx.export(..., dynamo=True)`, every
file beside its weights (`<name>.onnx` + `<name>.onnx.data` where the exporter splits them).  Runs in
the benchmark venv (`sh benchmarks/peers.sh`); the package never imports torch.

    .bench-venv/bin/python benchmarks/export_models.py [--out DIR] [--only resnet18,vit_b_16]
    .bench-venv/bin/python benchmarks/export_models.py --tiny   # the small files tests/frontend/exported/ holds

`--tiny` writes the same architectures at tiny widths (a few hundred KB each) into
tests/frontend/exported/, with each model's input and onnxruntime's output beside it (`<name>.npz`), so
that CI checks ptowsp against them without torch or onnxruntime; and, in dynamic/, three of them with
symbolic batch and sequence dimensions (two bindings checked), and in classic/, five as the
TorchScript exporter (`dynamo=False`) writes them.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TINY_DIR = HERE.parent / "tests" / "frontend" / "exported"


# -- transformers written as torch users write them -------------------------------------------------
def _encoder(vocab: int, seq: int, width: int, heads: int, ff: int, layers: int):
    """A BERT-style encoder: token + position embeddings (gathers), a padding mask built from the input
    ids (Equal / Where), post-norm layers with exact GELU."""
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.norm = nn.LayerNorm(width, eps=1e-12)
            layer = nn.TransformerEncoderLayer(width, heads, ff, dropout=0.0, activation="gelu", batch_first=True,
                                               layer_norm_eps=1e-12)
            self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

        def forward(self, ids):
            positions = torch.arange(ids.shape[1], device=ids.device)
            h = self.norm(self.tokens(ids) + self.positions(positions)[None])
            return self.layers(h, src_key_padding_mask=ids == 0)

    ids = torch.randint(1, vocab, (1, seq))
    return Encoder(), (ids,)


def _decoder_block(seq: int, width: int, heads: int, ff: int):
    """A GPT-2 style block: pre-norm, one fused qkv projection, causal attention through
    scaled_dot_product_attention, tanh GELU."""
    import torch
    from torch import nn
    from torch.nn import functional as F  # noqa: N812 - torch's own name

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, ff), nn.Linear(ff, width)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
            q, k, v = (t.view(b, s, heads, width // heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, width))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    return Block(), (torch.randn(1, seq, width),)


def _tiny_resnet(bottleneck: bool):
    """torchvision's ResNet at 8-32 channels (its class fixes them at 64-2048): the same stem, residual
    blocks with a strided projection, pooling, flatten and classifier."""
    from torch import nn
    from torchvision.models.resnet import BasicBlock, Bottleneck

    def projection(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 1, 2, bias=False), nn.BatchNorm2d(cout))

    if bottleneck:
        blocks = [Bottleneck(8, 2), Bottleneck(8, 4, 2, projection(8, 16))]
    else:
        blocks = [BasicBlock(8, 8), BasicBlock(8, 16, 2, projection(8, 16))]
    return nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(16, 10))


def _vision(name: str, tiny: bool):
    import torch
    import torchvision

    if name == "vit_b_16" and tiny:
        model = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                     hidden_dim=16, mlp_dim=32, num_classes=10)
        torch.nn.init.normal_(model.heads.head.weight, std=0.5)
        return model, (torch.randn(1, 3, 32, 32),)
    kwargs = {"num_classes": 10} if tiny else {}
    if tiny and name.startswith(("mobilenet", "efficientnet")):
        kwargs["width_mult"] = 0.25
    if tiny and name == "efficientnet_b0":
        model = torchvision.models.efficientnet.EfficientNet(
            torchvision.models.efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)[0],
            dropout=0.0, num_classes=10)
    elif tiny and name.startswith("resnet"):
        model = _tiny_resnet(name == "resnet50")
    elif tiny and name == "mobilenet_v2":  # one inverted residual block per stage (torchvision's has 17 in all)
        setting = [[1, 16, 1, 1], [6, 24, 1, 2], [6, 32, 1, 2], [6, 64, 1, 2], [6, 96, 1, 1], [6, 160, 1, 2],
                   [6, 320, 1, 1]]
        model = torchvision.models.MobileNetV2(num_classes=10, width_mult=0.25, inverted_residual_setting=setting)
    elif tiny and name == "mobilenet_v3_small":
        setting, last = torchvision.models.mobilenetv3._mobilenet_v3_conf(name, width_mult=0.25)
        # its first four blocks (squeeze-excite, ReLU and hard-swish ones among them), not all eleven
        model = torchvision.models.MobileNetV3(setting[:4], last, num_classes=10)
    else:
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
    if name == "vit_b_16":  # torchvision starts its classifier at zero: every output would be 0
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    size = 32 if tiny else 224
    return model, (torch.randn(1, 3, size, size),)


VISION = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16"]


def make(name: str, tiny: bool):
    if name in VISION:
        return _vision(name, tiny)
    if name == "bert_encoder":
        return _encoder(100, 16, 32, 2, 64, 2) if tiny else _encoder(30522, 128, 768, 12, 3072, 12)
    if name == "gpt2_block":
        return _decoder_block(16, 32, 2, 128) if tiny else _decoder_block(128, 768, 12, 3072)
    raise SystemExit(f"unknown model {name!r}")


MODELS = [*VISION, "bert_encoder", "gpt2_block"]


# the dimensions each model leaves symbolic in its dynamic export (torch.export.Dim names)
DYNAMIC = {"resnet18": {0: "batch"}, "gpt2_block": {0: "batch", 1: "sequence"}, "bert_encoder": {1: "sequence"}}


CLASSIC = ["resnet18", "mobilenet_v3_small", "vit_b_16", "bert_encoder", "gpt2_block"]  # also dynamo=False


def export(name: str, out: Path, tiny: bool, dynamic: bool = False, classic: bool = False) -> Path:
    import inspect

    import torch

    torch.manual_seed(0)
    model, args = make(name, tiny)
    model.eval()
    path = out / f"{name}.onnx"
    start = time.perf_counter()
    shapes = None
    if dynamic:
        first = next(iter(inspect.signature(model.forward).parameters))
        shapes = {first: {d: torch.export.Dim(n, min=1 if n == "batch" else 2, max=64)
                          for d, n in DYNAMIC[name].items()}}
    if classic:  # the TorchScript exporter, as older code calls it (traced with autograd on: under no_grad
        # torch's attention takes a fused kernel that exporter cannot write)
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17)
    else:
        with torch.no_grad():
            torch.onnx.export(model, args, str(path), dynamo=True, external_data=not tiny, verbose=False,
                              dynamic_shapes=shapes)
    print(f"{name}: exported in {time.perf_counter() - start:.1f} s -> {path} "
          f"({sum(p.stat().st_size for p in out.glob(name + '.onnx*')) / 1e6:.1f} MB)", flush=True)
    return path


def quantize(source: Path, out: Path) -> Path:
    """`source` quantized to int8 in the QDQ format, as onnxruntime's quantize_static writes it (per-channel
    symmetric int8 weights, int8 activations calibrated on four random images)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    graph_input = onnx.load(str(source), load_external_data=False).graph.input[0]
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]

    class Images(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{graph_input.name: rng.standard_normal(shape, np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    path = out / f"{source.stem}_int8.onnx"
    quantize_static(str(source), str(path), Images(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    print(f"{source.stem}: quantized -> {path}", flush=True)
    return path


def expected(path: Path, bindings: tuple[dict[str, int], ...] = ({},)) -> None:
    """onnxruntime's output for fixed inputs, beside the model (what CI checks ptowsp against): one case
    per binding of the symbolic dimensions (`<k>:input:<name>`, `<k>:output:<name>`; a static model's
    one case is written without the `<k>:`)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(0)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    arrays = {}
    for k, binding in enumerate(bindings):
        feeds = {}
        for inp in model.graph.input:
            t = inp.type.tensor_type
            shape = [d.dim_value or binding[d.dim_param] for d in t.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[inp.name] = rng.integers(1, 100, shape).astype(dtype) if np.dtype(dtype).kind in "iu" else \
                rng.standard_normal(shape).astype(dtype)
        outs = session.run(None, feeds)
        case = f"{k}:" if binding else ""
        arrays |= {f"{case}input:{n}": v for n, v in feeds.items()}
        arrays |= {f"{case}output:{o.name}": v for o, v in zip(session.get_outputs(), outs, strict=True)}
    np.savez(path.with_suffix(".npz"), **arrays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "exported")
    parser.add_argument("--only", default="", help="comma-separated model names (default: all)")
    parser.add_argument("--tiny", action="store_true", help="tiny widths into tests/frontend/exported/")
    args = parser.parse_args()
    out = TINY_DIR if args.tiny else args.out
    out.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else MODELS + ["resnet50_int8"]
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    if args.tiny and not args.only:  # one import and one build for every batch size and sequence length
        (TINY_DIR / "dynamic").mkdir(exist_ok=True)
        for name in DYNAMIC:
            expected(export(name, TINY_DIR / "dynamic", True, dynamic=True),
                     ({"batch": 1, "sequence": 5}, {"batch": 3, "sequence": 16}))
        (TINY_DIR / "classic").mkdir(exist_ok=True)
        for name in CLASSIC:
            expected(export(name, TINY_DIR / "classic", True, classic=True))
    for name in names:
        if name == "resnet50_int8":
            source = out / "resnet50.onnx"
            if not source.exists():
                export("resnet50", out, args.tiny)
            expected(quantize(source, out))
            continue
        expected(export(name, out, args.tiny))


if __name__ == "__main__":
    main()
