"""ONNX's recurrent layers as ptowsp scans: LSTM and GRU (what torch exports for nn.LSTM and nn.GRU).

The input projection of every step is one contraction over the whole sequence (XW); the
recurrence is a scan over t of the state, whose step holds the matmul R h_{t-1}, as in the zoo's
lstm (workloads/zoo/recurrences.py).  LSTM, gates i, o, f, c in ONNX's order:

    z_g = W_g x_t + R_g h_{t-1} + Wb_g + Rb_g,   c_t = sig(z_f) c_{t-1} + sig(z_i) tanh(z_c),
    h_t = sig(z_o) tanh(c_t)                      (state: c_t and h_t side by side).

GRU, gates z, r, h, with linear_before_reset=1 (torch's: the reset gate scales R_h h_{t-1} + Rb_h):

    z = sig(W_z x_t + R_z h_{t-1} + b_z),  r = sig(W_r x_t + R_r h_{t-1} + b_r),
    n = tanh(W_h x_t + Wb_h + r (R_h h_{t-1} + Rb_h)),   h_t = (1 - z) n + z h_{t-1}.

Forward direction, the default activations, no peepholes, no clip, every sequence full length:
anything else is refused naming the attribute or input.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_import import Importer, Value, attribute, describe, text_attribute
from ptowsp.frontend.onnx_ops import op, refuse

_LSTM_I, _LSTM_O, _LSTM_F, _LSTM_C = range(4)  # ONNX's gate order in W, R and B
_GRU_Z, _GRU_R, _GRU_H = range(3)
_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}


@op("LSTM")
def lstm(imp: Importer, node: onnx.NodeProto) -> None:
    x, w, r, bias, hidden = _layer(imp, node, gates=4)
    h0, c0 = imp.optional(node, 5), imp.optional(node, 6)
    xw = _projection(imp, node, x, w, bias, hidden, gates=4)
    m = pw.reduce_axis(hidden, "m")

    def gate(g, t, b, j):
        return xw.at([t - 1, g, b, j]) + pw.sum(r.at([0, g * hidden + j, m]) * state[t - 1, 1, b, m], m)

    def step(t, s, b, j):
        c = pw.sigmoid(gate(_LSTM_F, t, b, j)) * state[t - 1, 0, b, j] + \
            pw.sigmoid(gate(_LSTM_I, t, b, j)) * pw.tanh(gate(_LSTM_C, t, b, j))
        return pw.where(s == 0, c, pw.sigmoid(gate(_LSTM_O, t, b, j)) * pw.tanh(c))

    def init(s, b, j):
        if c0 is None and h0 is None:
            return 0.0
        return pw.where(s == 0, 0.0 if c0 is None else c0.at([0, b, j]), 0.0 if h0 is None else h0.at([0, b, j]))

    steps, batch = x.shape[:2]
    state = imp.wl.scan(imp.name(f"{node.name or node.op_type}_state"), (steps + 1, 2, batch, hidden), axis="t",
                        init=init, update=step)
    _outputs(imp, node, steps, batch, hidden, [lambda t, b, j: state[t, 1, b, j], lambda t, b, j: state[t, 0, b, j]])


@op("GRU")
def gru(imp: Importer, node: onnx.NodeProto) -> None:
    x, w, r, bias, hidden = _layer(imp, node, gates=3)
    if int(attribute(node, "linear_before_reset", 0)) != 1:
        refuse(node, "linear_before_reset", attribute(node, "linear_before_reset", 0),
               "1 (what torch exports: the reset gate scales R_h h + Rb_h)")
    h0 = imp.optional(node, 5)
    xw = _projection(imp, node, x, w, bias, hidden, gates=3, rb_gates=_GRU_H)  # z and r: not h
    m = pw.reduce_axis(hidden, "m")

    def recurrent(g, t, b, j):
        return pw.sum(r.at([0, g * hidden + j, m]) * state[t - 1, b, m], m)

    def step(t, b, j):
        z = pw.sigmoid(xw.at([t - 1, _GRU_Z, b, j]) + recurrent(_GRU_Z, t, b, j))
        reset = pw.sigmoid(xw.at([t - 1, _GRU_R, b, j]) + recurrent(_GRU_R, t, b, j))
        scaled = recurrent(_GRU_H, t, b, j) if bias is None else \
            recurrent(_GRU_H, t, b, j) + bias.at([0, 3 * hidden + _GRU_H * hidden + j])
        n = pw.tanh(xw.at([t - 1, _GRU_H, b, j]) + reset * scaled)
        return (1.0 - z) * n + z * state[t - 1, b, j]

    steps, batch = x.shape[:2]
    state = imp.wl.scan(imp.name(f"{node.name or node.op_type}_state"), (steps + 1, batch, hidden), axis="t",
                        init=(lambda b, j: 0.0) if h0 is None else (lambda b, j: h0.at([0, b, j])), update=step)
    _outputs(imp, node, steps, batch, hidden, [lambda t, b, j: state[t, b, j]])


def _layer(imp: Importer, node: onnx.NodeProto, gates: int) -> tuple[Value, Value, Value, Value | None, int]:
    """(X, W, R, B, hidden size) of a recurrent node, after refusing what the scans do not compute."""
    x, w, r, bias = imp.value(node, 0), imp.value(node, 1), imp.value(node, 2), imp.optional(node, 3)
    if len(node.input) > 4 and node.input[4] and not _full_lengths(imp, node, x.shape):
        refuse(node, "sequence_lens", node.input[4], "absent, or every sequence of full length")
    if node.op_type == "LSTM" and len(node.input) > 7 and node.input[7]:
        refuse(node, "P (peepholes)", node.input[7], "absent")
    direction = text_attribute(node, "direction", "forward")
    if direction != "forward":
        refuse(node, "direction", direction, "forward")
    activations = attribute(node, "activations")
    if activations is not None and [a.decode() if isinstance(a, bytes) else a for a in activations] != \
            _DEFAULT_ACTIVATIONS[node.op_type]:
        refuse(node, "activations", activations, ", ".join(_DEFAULT_ACTIVATIONS[node.op_type]))
    for name in ("clip", "input_forget", "layout"):
        if attribute(node, name) not in (None, 0):
            refuse(node, name, attribute(node, name), "absent or 0")
    if len(x.shape) != 3:
        raise WorkloadError(f"{describe(node)}: X of shape {x.shape}; (sequence, batch, inputs) is needed")
    inputs = x.shape[2]
    hidden = int(attribute(node, "hidden_size", r.shape[-1]))
    if w.shape != (1, gates * hidden, inputs) or r.shape != (1, gates * hidden, hidden):
        raise WorkloadError(f"{describe(node)}: W {w.shape} and R {r.shape} do not fit X {x.shape} and hidden_size "
                            f"{hidden}: expected (1, {gates * hidden}, {inputs}) and (1, {gates * hidden}, {hidden})")
    return x, w, r, bias, hidden


def _projection(imp: Importer, node: onnx.NodeProto, x: Value, w: Value, bias: Value | None, hidden: int,
                gates: int, rb_gates: int | None = None) -> Value:
    """XW[t, g, b, j] = W_g x_t + Wb_g + Rb_g (Rb only for the first `rb_gates` gates: GRU's h gate adds
    its Rb under the reset gate): one contraction over the whole sequence, outside the recurrence."""
    k = pw.reduce_axis(x.shape[2], "k")
    rb_gates = gates if rb_gates is None else rb_gates

    def projection(t, g, b, j):
        row = g * hidden + j
        total = pw.sum(x.at([t, b, k]) * w.at([0, row, k]), k)
        if bias is None:
            return total
        rb = bias.at([0, gates * hidden + row])
        return total + bias.at([0, row]) + (rb if rb_gates == gates else pw.where(g < rb_gates, rb, 0.0))

    return imp.compute(node, (x.shape[0], gates, x.shape[1], hidden), projection, part="projection")


def _outputs(imp: Importer, node: onnx.NodeProto, steps: int, batch: int, hidden: int,
             last: list[Callable[..., object]]) -> None:
    """Y (every step's h), then the last h and (LSTM) the last c, for each output the node names;
    `last[0](t, b, j)` is h after step t, `last[1]` c."""
    h = last[0]
    outputs = [((steps, 1, batch, hidden), lambda t, d, b, j: h(t + 1, b, j))]
    outputs += [((1, batch, hidden), lambda d, b, j, f=f: f(steps, b, j)) for f in last]
    for n, (shape, fn) in enumerate(outputs):
        if len(node.output) > n and node.output[n]:
            imp.compute(node, shape, fn, output=n)


def _full_lengths(imp: Importer, node: onnx.NodeProto, shape: tuple[int, ...]) -> bool:
    """Whether a constant sequence_lens gives every sequence the whole length (as torch exports it)."""
    name = node.input[4]
    return name in imp.arrays and bool((imp.arrays[name] == shape[0]).all())
