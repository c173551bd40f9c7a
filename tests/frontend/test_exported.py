"""Models as PyTorch's dynamo exporter writes them, imported unchanged and checked against onnxruntime.

tests/frontend/exported/ holds each model at tiny widths, written by
`benchmarks/export_models.py --tiny` in the benchmark venv (torch 2.14, `dynamo=True`), with a fixed
input and onnxruntime's output for it (`<name>.npz`): CI needs neither torch nor onnxruntime.  The
architectures are torchvision's own classes (ResNet blocks, MobileNetV2/V3, EfficientNet, ViT) and
the transformers torch users write (an nn.TransformerEncoder with embeddings and a padding mask; a
GPT-2 block through scaled_dot_product_attention), so every operator pattern the exporter writes for
the full-size models is here; resnet50_int8 is the tiny ResNet-50 quantized by onnxruntime's
quantize_static (QDQ, int8), checked against onnxruntime's integer kernels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ptowsp as pw

EXPORTED = Path(__file__).parent / "exported"
MODELS = sorted(p.stem for p in EXPORTED.glob("*.onnx"))


def inputs_and_expected(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    data = np.load(EXPORTED / f"{name}.npz")
    return ({k.split(":", 1)[1]: data[k] for k in data if k.startswith("input:")},
            {k.split(":", 1)[1]: data[k] for k in data if k.startswith("output:")})


def assert_matches_onnxruntime(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    """Each output within 1e-4 of onnxruntime's largest magnitude (float32 sums in another order)."""
    assert len(got) == len(want), what
    for (name, value), expected in zip(got.items(), want.values(), strict=True):
        scale = max(float(np.abs(expected).max()), 1e-6)
        err = float(np.abs(np.asarray(value, np.float64) - expected).max()) / scale
        assert value.shape == expected.shape and err < 1e-4, f"{what}: output {name}: relative error {err:.2e}"


def test_every_architecture_is_there():
    assert {"resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "vit_b_16",
            "bert_encoder", "gpt2_block", "resnet50_int8"} <= set(MODELS)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """Each model imported from a working directory that is not its folder (external data and paths are
    the model file's business, not the current directory's)."""
    cache: dict[str, pw.Workload] = {}

    def get(name: str) -> pw.Workload:
        if name not in cache:
            with pytest.MonkeyPatch.context() as mp:
                mp.chdir(tmp_path_factory.mktemp("elsewhere"))
                cache[name] = pw.frontend.from_onnx(EXPORTED / f"{name}.onnx")
        return cache[name]
    return get


@pytest.mark.parametrize("name", MODELS)
def test_reference_matches_onnxruntime(imported, name):
    feeds, want = inputs_and_expected(name)
    assert_matches_onnxruntime(pw.reference(imported(name), **feeds), want, f"{name} on pw.reference")


@pytest.mark.parametrize("target", ["cpu", "aicore"])
@pytest.mark.parametrize("name", MODELS)
def test_built_model_matches_onnxruntime(imported, name, target):
    feeds, want = inputs_and_expected(name)
    prog = pw.build(imported(name), target, **({"workers": 2} if target == "cpu" else {}))
    assert_matches_onnxruntime(prog(**feeds), want, f"{name} on {target}")


DYNAMIC = sorted(p.stem for p in (EXPORTED / "dynamic").glob("*.onnx"))


def cases(name: str) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """Each binding of the symbolic dimensions the export was checked at: (inputs, onnxruntime's outputs)."""
    data = np.load(EXPORTED / "dynamic" / f"{name}.npz")
    keys = sorted({k.split(":", 1)[0] for k in data})
    return [({k.split(":", 2)[2]: data[k] for k in data if k.startswith(f"{case}:input:")},
             {k.split(":", 2)[2]: data[k] for k in data if k.startswith(f"{case}:output:")}) for case in keys]


@pytest.mark.parametrize("name", DYNAMIC)
def test_one_import_and_one_build_serve_every_batch_size_and_sequence_length(name):
    """torch's export with torch.export.Dim batch and sequence: the dimensions stay sizes of the workload, and
    one cpu build runs each binding; the aicore target builds one binding (it takes no symbolic sizes)."""
    wl = pw.frontend.from_onnx(EXPORTED / "dynamic" / f"{name}.onnx")
    assert wl.sizes, "the symbolic dimensions became sizes"
    prog = pw.build(wl, "cpu", workers=2)
    seen = set()
    for feeds, want in cases(name):
        assert_matches_onnxruntime(prog(**feeds), want, f"{name} on cpu at {[v.shape for v in feeds.values()]}")
        assert_matches_onnxruntime(pw.reference(wl, **feeds), want, f"{name} on pw.reference")
        seen.add(tuple(v.shape for v in feeds.values()))
    assert len(seen) == 2
    feeds, want = cases(name)[-1]
    bound = pw.build(pw.frontend.from_onnx(EXPORTED / "dynamic" / f"{name}.onnx",
                                           shapes={k: v.shape for k, v in feeds.items()}), "aicore")
    assert_matches_onnxruntime(bound(**feeds), want, f"{name} on aicore, bound by shapes=")


CLASSIC = sorted(p.stem for p in (EXPORTED / "classic").glob("*.onnx"))


@pytest.mark.parametrize("name", CLASSIC)
def test_the_torchscript_exporter_s_models_match_onnxruntime(name):
    """`dynamo=False` (opset 17): Identity and Constant nodes, Mod/Sqrt/Div shape arithmetic, input names
    such as `input.1`, which the import makes identifiers (`input_1`; the run names the renamed input)."""
    data = np.load(EXPORTED / "classic" / f"{name}.npz")
    wl = pw.frontend.from_onnx(EXPORTED / "classic" / f"{name}.onnx")
    feeds = {k.split(":", 1)[1].replace(".", "_"): data[k] for k in data if k.startswith("input:")}
    want = {k.split(":", 1)[1]: data[k] for k in data if k.startswith("output:")}
    assert set(feeds) == set(wl.inputs)
    assert_matches_onnxruntime(pw.build(wl, "cpu", workers=2)(**feeds), want, f"{name} (dynamo=False) on cpu")
    assert_matches_onnxruntime(pw.reference(wl, **feeds), want, f"{name} (dynamo=False) on pw.reference")
    if "input_1" in wl.inputs:
        with pytest.raises(pw.InputError, match="'input_1': an imported model's names become identifiers"):
            pw.reference(wl, **{"input.1": feeds["input_1"]})
