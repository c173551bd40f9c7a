"""ONNX's recurrent layers as ptowsp scans: LSTM (what torch exports for nn.LSTM).

The input projection of every step is one contraction over the whole sequence (XW); the
recurrence is a scan over t of the state (c_t, h_t), whose step holds the matmul R h_{t-1}, as in
the zoo's lstm (workloads/zoo/recurrences.py).  ONNX's gate order is i, o, f, c:

    z_g = W_g x_t + R_g h_{t-1} + Wb_g + Rb_g,   c_t = sig(z_f) c_{t-1} + sig(z_i) tanh(z_c),
    h_t = sig(z_o) tanh(c_t).

Forward direction, the default activations, no peepholes, no clip, every sequence full length:
anything else is refused naming the attribute or input.
"""

from __future__ import annotations

import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_import import Importer, attribute, describe
from ptowsp.frontend.onnx_ops import op, refuse

_I, _O, _F, _C = range(4)  # ONNX's gate order in W, R and B


@op("LSTM")
def lstm(imp: Importer, node: onnx.NodeProto) -> None:
    x, w, r = imp.value(node, 0), imp.value(node, 1), imp.value(node, 2)
    bias = imp.optional(node, 3)
    for k, what in ((4, "sequence_lens"), (7, "P (peepholes)")):
        if len(node.input) > k and node.input[k]:
            if k == 4 and _full_lengths(imp, node, x.shape):
                continue
            refuse(node, what, node.input[k], "absent (sequences of full length, no peepholes)")
    h0, c0 = imp.optional(node, 5), imp.optional(node, 6)
    direction = attribute(node, "direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction != "forward":
        refuse(node, "direction", direction, "forward")
    if attribute(node, "activations") is not None and [a.decode() if isinstance(a, bytes) else a for a in
                                                      attribute(node, "activations")] != ["Sigmoid", "Tanh", "Tanh"]:
        refuse(node, "activations", attribute(node, "activations"), "Sigmoid, Tanh, Tanh")
    for name in ("clip", "input_forget", "layout"):
        if attribute(node, name) not in (None, 0):
            refuse(node, name, attribute(node, name), "absent or 0")
    steps, batch, inputs = x.shape
    hidden = int(attribute(node, "hidden_size", r.shape[-1]))
    if w.shape != (1, 4 * hidden, inputs) or r.shape != (1, 4 * hidden, hidden):
        raise WorkloadError(f"{describe(node)}: W {w.shape} and R {r.shape} do not fit X {x.shape} and "
                            f"hidden_size {hidden}: expected (1, {4 * hidden}, {inputs}) and (1, {4 * hidden}, {hidden})")

    k = pw.reduce_axis(inputs, "k")

    def projection(t, g, b, j):
        row = g * hidden + j
        total = pw.sum(x.at([t, b, k]) * w.at([0, row, k]), k)
        return total if bias is None else total + bias.at([0, row]) + bias.at([0, 4 * hidden + row])

    xw = imp.compute(node, (steps, 4, batch, hidden), projection, part="projection")
    m = pw.reduce_axis(hidden, "m")

    def gate(g, t, b, j):
        return xw.at([t - 1, g, b, j]) + pw.sum(r.at([0, g * hidden + j, m]) * state[t - 1, 1, b, m], m)

    def step(t, s, b, j):
        c = pw.sigmoid(gate(_F, t, b, j)) * state[t - 1, 0, b, j] + \
            pw.sigmoid(gate(_I, t, b, j)) * pw.tanh(gate(_C, t, b, j))
        return pw.where(s == 0, c, pw.sigmoid(gate(_O, t, b, j)) * pw.tanh(c))

    def init(s, b, j):
        if c0 is None and h0 is None:
            return 0.0
        return pw.where(s == 0, 0.0 if c0 is None else c0.at([0, b, j]), 0.0 if h0 is None else h0.at([0, b, j]))

    state = imp.wl.scan(imp.name(f"{node.name or node.op_type}_state"), (steps + 1, 2, batch, hidden), axis="t",
                        init=init, update=step)
    outputs = [
        ((steps, 1, batch, hidden), lambda t, d, b, j: state[t + 1, 1, b, j]),  # Y: every step's h
        ((1, batch, hidden), lambda d, b, j: state[steps, 1, b, j]),  # Y_h: the last h
        ((1, batch, hidden), lambda d, b, j: state[steps, 0, b, j]),  # Y_c: the last c
    ]
    for n, (shape, fn) in enumerate(outputs):
        if len(node.output) > n and node.output[n]:
            imp.compute(node, shape, fn, output=n)


def _full_lengths(imp: Importer, node: onnx.NodeProto, shape: tuple[int, ...]) -> bool:
    """Whether a constant sequence_lens gives every sequence the whole length (as torch exports it)."""
    name = node.input[4]
    return name in imp.arrays and bool((imp.arrays[name] == shape[0]).all())
