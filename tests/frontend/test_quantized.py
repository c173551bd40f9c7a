"""Quantized ONNX models: the QDQ format (onnxruntime's quantize_static) and the QOperator format,
checked against onnx's reference evaluator (which computes them in integers as onnxruntime does)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import ptowsp as pw
from ptowsp.backends.cpu.isa import target_cpu



def rng() -> np.random.Generator:
    """The data of each case: drawn afresh, so a case is the same whatever ran before it (xdist's order)."""
    return np.random.default_rng(7)


def model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "q", inputs, outputs, [nh.from_array(v, k) for k, v in inits.items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])


def qdq_conv(pads=(1, 1, 1, 1), stride=1, channels=(4, 6), size=9) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv (DQ of per-channel int8 weights, DQ of an int32 bias) -> Relu -> Q -> DQ."""
    c, o = channels
    w = rng().integers(-127, 128, (o, c, 3, 3)).astype(np.int8)
    ws = rng().uniform(0.002, 0.01, o).astype(np.float32)
    xs, xzp = np.float32(0.03), np.int8(-5)
    inits = {"xs": np.array(xs), "xzp": np.array(xzp), "w": w, "ws": ws, "wzp": np.zeros(o, np.int8),
             "b": rng().integers(-300, 300, o).astype(np.int32), "bs": (xs * ws).astype(np.float32),
             "bzp": np.zeros(o, np.int32), "ys": np.array(np.float32(0.05)), "yzp": np.array(np.int8(-128))}
    nodes = [oh.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             oh.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xf"], name="dq_x"),
             oh.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wf"], axis=0),
             oh.make_node("DequantizeLinear", ["b", "bs", "bzp"], ["bf"], axis=0),
             oh.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=list(pads), strides=[stride, stride]),
             oh.make_node("Relu", ["c"], ["r"]),
             oh.make_node("QuantizeLinear", ["r", "ys", "yzp"], ["yq"]),
             oh.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["y"])]
    return model(nodes, [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                 [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def qdq_matmul() -> onnx.ModelProto:
    w = rng().integers(-127, 128, (16, 8)).astype(np.int8)
    inits = {"xs": np.array(np.float32(0.02)), "xzp": np.array(np.int8(3)), "w": w,
             "ws": rng().uniform(0.002, 0.01, 8).astype(np.float32), "wzp": np.zeros(8, np.int8)}
    nodes = [oh.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             oh.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xf"], name="dq_x"),
             oh.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wf"], axis=1),
             oh.make_node("MatMul", ["xf", "wf"], ["y"])]
    return model(nodes, [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                 [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def qlinear_conv(weight_zeros: np.ndarray = np.zeros(5, np.int8)) -> onnx.ModelProto:
    """A QLinearConv; `weight_zeros` its weights' zero point (per output channel, or one)."""
    inits = {"xs": np.array(np.float32(0.03)), "xzp": np.array(np.uint8(120)),
             "w": rng().integers(-127, 128, (5, 3, 3, 3)).astype(np.int8),
             "ws": rng().uniform(0.002, 0.01, 5).astype(np.float32), "wzp": weight_zeros,
             "ys": np.array(np.float32(0.2)), "yzp": np.array(np.uint8(128)),
             "b": rng().integers(-500, 500, 5).astype(np.int32)}
    nodes = [oh.make_node("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"], ["y"],
                          pads=[1, 1, 1, 1], strides=[2, 2])]
    return model(nodes, [oh.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8])],
                 [oh.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)


def qlinear_matmul() -> onnx.ModelProto:
    inits = {"as": np.array(np.float32(0.05)), "azp": np.array(np.uint8(100)),
             "b": rng().integers(0, 256, (12, 7)).astype(np.uint8), "bs": np.array(np.float32(0.01)),
             "bzp": np.array(np.uint8(130)), "ys": np.array(np.float32(0.3)), "yzp": np.array(np.uint8(90))}
    nodes = [oh.make_node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"], ["y"])]
    return model(nodes, [oh.make_tensor_value_info("a", TensorProto.UINT8, [3, 12])],
                 [oh.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)


def integer_ops() -> onnx.ModelProto:
    inits = {"azp": np.array(np.uint8(7)), "b": rng().integers(-128, 128, (6, 4)).astype(np.int8),
             "w": rng().integers(-128, 128, (2, 3, 2, 2)).astype(np.int8), "xzp": np.array(np.uint8(9))}
    nodes = [oh.make_node("MatMulInteger", ["a", "b", "azp"], ["m"]),
             oh.make_node("ConvInteger", ["x", "w", "xzp"], ["c"], pads=[0, 1, 0, 1])]
    return model(nodes, [oh.make_tensor_value_info("a", TensorProto.UINT8, [5, 6]),
                         oh.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 5, 5])],
                 [oh.make_tensor_value_info("m", TensorProto.INT32, None),
                  oh.make_tensor_value_info("c", TensorProto.INT32, None)], inits)


def feeds_for(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    out = {}
    for inp in m.graph.input:
        t = inp.type.tensor_type
        shape, dtype = [d.dim_value for d in t.shape.dim], onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        out[inp.name] = rng().integers(0, 256, shape).astype(dtype) if np.dtype(dtype).kind in "iu" else \
            rng().standard_normal(shape).astype(dtype) * 2
    return out


# 32 channels: the cpu blocks the int8 convolution by a vector of channels (see the test below)
WIDE = {"channels": (32, 32), "size": 14}
CASES = {"qdq_conv": qdq_conv, "qdq_conv_strided_unpadded": lambda: qdq_conv((0, 0, 0, 0), 2),
         "qdq_conv_blocked": lambda: qdq_conv(**WIDE), "qdq_conv_blocked_strided": lambda: qdq_conv(stride=2, **WIDE),
         "qdq_matmul": qdq_matmul, "qlinear_conv": qlinear_conv, "qlinear_matmul": qlinear_matmul,
         "qlinear_conv_weight_zero_points": lambda: qlinear_conv(np.array([3, -2, 0, 7, -9], np.int8)),
         "qlinear_conv_one_weight_zero_point": lambda: qlinear_conv(np.array([5], np.int8)),
         "integer_ops": integer_ops}


@pytest.mark.parametrize("target", ["reference", "cpu", "aicore"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_onnx_reference_evaluator(case, target):
    m = CASES[case]()
    feeds = feeds_for(m)
    want = ReferenceEvaluator(m).run(None, feeds)
    wl = pw.frontend.from_onnx(m)
    got = pw.reference(wl, **feeds) if target == "reference" else pw.build(wl, target)(**feeds)
    for (name, value), expected in zip(got.items(), want, strict=True):
        assert value.dtype == expected.dtype, name
        if value.dtype.kind in "iu":  # requantized: a tie rounded the other way moves one step at most
            diff = np.abs(value.astype(np.int64) - expected.astype(np.int64))
            assert diff.max() <= (0 if case == "integer_ops" else 1), (name, diff.max())
            assert np.count_nonzero(diff) <= max(1, diff.size // 100), (name, np.count_nonzero(diff))
        elif case == "qdq_matmul":  # a float result: the int32 sum rescaled
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5 * float(np.abs(expected).max()))
        else:  # dequantized int8 output: one quantization step (0.05) at most
            np.testing.assert_allclose(value, expected, atol=0.05 + 1e-6, rtol=0)
            assert np.count_nonzero(value != expected) <= max(1, value.size // 100)


@pytest.mark.parametrize("case", ["qdq_conv", "qdq_matmul"])
def test_qdq_contractions_sum_int8_in_int32(case):
    """The dequantized activation is never made, and the contraction reads the int8 tensors themselves."""
    wl = pw.frontend.from_onnx(CASES[case]())
    assert "dq_x" not in wl.tasks
    bodies = [str(wl.task(t).body) for t in wl.tasks]
    assert any("int32" in b and "sum" in b for b in bodies), bodies


@pytest.mark.parametrize("stride", [1, 2])
def test_qdq_convolutions_run_on_channel_blocked_int8_tiles(stride):
    """On cpu the int8 convolution is blocked by a vector of output channels, summed in int32, and its
    rescale computed in that layout; its register tile calls gemm_i8 (VNNI or AVX2's pair products)."""
    built = pw.build(pw.frontend.from_onnx(qdq_conv(stride=stride, **WIDE)), "cpu")
    wl = built.schedule.workload
    sums = [t for t in wl.tasks if t.endswith("_blocked") and wl.task(t).tensor.dtype == "int32"]
    assert len(sums) == 1 and len(wl.task(sums[0]).tensor.shape) == 5, sums
    assert any(t.endswith("_rescaled") for t in wl.tasks)
    assert ("kernel='gemm_i8'" in str(built.schedule)) == (target_cpu().vnni or target_cpu().avx2), str(built.schedule)


def test_half_vector_channel_blocks_call_the_int16_pair_kernel_and_stay_exact():
    """24 output channels are blocked by 8 (half an AVX-512 vector): `gemm_i8` over 8 columns, which
    VNNI's `vpdpbusd` (16 at a time) cannot take, runs `vpmaddwd` pairs (`vpdpwssd` where LLVM fuses
    the add, with VNNI) instead of scalar code."""
    if not (target_cpu().vnni or target_cpu().avx2):
        pytest.skip("the cpu the kernels are built for has neither VNNI nor AVX2")
    m = qdq_conv(channels=(24, 24), size=14)
    feeds = feeds_for(m)
    built = pw.build(pw.frontend.from_onnx(m), "cpu")
    assert any("gemm_i8<" in built.source(t, "loops") and "x8x" in built.source(t, "loops")
               for t in built.program.order)
    asm = "".join(built.source(t, "asm") for t in built.program.order)
    assert "vpmaddwd" in asm or "vpdpwssd" in asm
    np.testing.assert_array_equal(built(**feeds)["y"], pw.reference(pw.frontend.from_onnx(m), **feeds)["y"])


def test_a_convolution_inside_its_requantization_is_stored_on_its_own_where_aicore_buffers_need_it():
    """256 channels, stride 2: computed inside the requantization's loops, the convolution's 196 KiB input
    overflows L0A/L0B however they go; aicore's default stores it, then streams and narrows it."""
    m = qdq_conv(stride=2, channels=(256, 256), size=28)
    feeds = feeds_for(m)
    built = pw.build(pw.frontend.from_onnx(m), "aicore")
    assert not built.schedule.compute_at_locations, str(built.schedule)
    got, want = built(**feeds)["y"], ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, atol=0.05 + 1e-6, rtol=0)
    assert np.count_nonzero(got != want) <= max(1, got.size // 100)


def test_quantize_linear_rounds_ties_to_even_and_saturates():
    inits = {"s": np.array(np.float32(0.5)), "z": np.array(np.int8(0))}
    m = model([oh.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
              [oh.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
              [oh.make_tensor_value_info("y", TensorProto.INT8, None)], inits)
    x = np.array([0.25, 0.75, -0.25, -0.75, 1.25, 100.0, -100.0, 0.3], np.float32)
    got = pw.build(pw.frontend.from_onnx(m), "cpu")(x=x)["y"]
    np.testing.assert_array_equal(got, [0, 2, 0, -2, 2, 127, -128, 1])


def test_blocked_quantization_is_refused_naming_the_node():
    inits = {"s": np.ones((2, 2), np.float32)}
    m = model([oh.make_node("DequantizeLinear", ["x", "s"], ["y"], name="blocked", axis=1, block_size=2)],
              [oh.make_tensor_value_info("x", TensorProto.INT8, [2, 4])],
              [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    with pytest.raises(pw.WorkloadError, match="blocked.*block_size"):
        pw.frontend.from_onnx(m)
