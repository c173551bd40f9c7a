"""ONNX's recurrent layers as ptowsp scans: RNN, LSTM and GRU, forward, reverse or bidirectional.

The input projection of every step is one contraction over the whole sequence (XW, for every
direction); each direction's recurrence is a scan over its steps of the state, whose step holds
the matmul R h_{t-1}, as in the zoo's lstm (workloads/zoo/recurrences.py).  A reverse direction
takes the sequence from its end: its step s reads x at time steps - s, and its output at time t is
its state after step steps - t.  LSTM, gates i, o, f, c in ONNX's order (P: the peepholes):

    z_g = W_g x_t + R_g h_{t-1} + Wb_g + Rb_g,
    c_t = sig(z_f + P_f c_{t-1}) c_{t-1} + sig(z_i + P_i c_{t-1}) tanh(z_c),
    h_t = sig(z_o + P_o c_t) tanh(c_t)            (state: c_t and h_t side by side).

GRU, gates z, r, h; linear_before_reset=1 (torch's) scales R_h h_{t-1} + Rb_h by the reset gate,
0 (the standard's default) scales h_{t-1} before R_h (each element then needs every reset value:
the step computes the reset gate inside R_h's sum, hidden^2 more terms a step):

    z = sig(W_z x_t + R_z h_{t-1} + b_z),  r = sig(W_r x_t + R_r h_{t-1} + b_r),
    n = tanh(W_h x_t + Wb_h + r (R_h h_{t-1} + Rb_h))   or   tanh(W_h x_t + Wb_h + R_h (r h_{t-1}) + Rb_h),
    h_t = (1 - z) n + z h_{t-1}.

RNN: h_t = tanh(W x_t + R h_{t-1} + Wb + Rb).  The default activations, no clip, every sequence
full length, layout 0: anything else is refused naming the attribute or input.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer, Value
from ptowsp.frontend.onnx_ops import op, refuse
from ptowsp.te import Expr

_LSTM_I, _LSTM_O, _LSTM_F, _LSTM_C = range(4)  # ONNX's gate order in W, R and B
_GRU_Z, _GRU_R, _GRU_H = range(3)
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
_AXES = itertools.count()


@dataclass(frozen=True)
class _Layer:
    x: Value
    w: Value
    r: Value
    bias: Value | None
    hidden: int
    reverse: tuple[bool, ...]  # per direction
    xw: Value  # xw[t, d, g, b, j]: the input projection
    gates: int

    @property
    def steps(self) -> int:
        return self.x.shape[0]

    @property
    def batch(self) -> int:
        return self.x.shape[1]

    def time(self, d: int, s: Expr) -> Expr:
        """The time of the input direction d takes at its step s (1-based)."""
        return self.steps - s if self.reverse[d] else s - 1

    def recurrent(self, d: int, g: int, j: Expr, h: Callable[[Expr], Expr]) -> Expr:
        """sum_m R_g[j, m] h(m)."""
        m = pw.reduce_axis(self.hidden, f"m{next(_AXES)}")  # (GRU's reset gate sums inside R_h's sum)
        return pw.sum(self.r.at([d, g * self.hidden + j, m]) * h(m), m)

    def recurrent_bias(self, d: int, g: int, j: Expr) -> Expr | float:
        """Rb_g[j] (0 without a bias)."""
        return 0.0 if self.bias is None else self.bias.at([d, (self.gates + g) * self.hidden + j])


def _scan(imp: Importer, node: onnx.NodeProto, d: int, shape: tuple[int, ...], init, update) -> pw.Tensor:
    return imp.wl.scan(imp.name(f"{node.name or node.op_type}_state{d if d else ''}"), shape, axis="t", init=init,
                       update=update)


@op("RNN")
def rnn(imp: Importer, node: onnx.NodeProto) -> None:
    layer = _layer(imp, node)
    h0 = imp.optional(node, 5)

    def direction(d):
        def step(t, b, j):
            return pw.tanh(layer.xw.at([layer.time(d, t), d, 0, b, j])
                           + layer.recurrent(d, 0, j, lambda m: state[t - 1, b, m]))
        state = _scan(imp, node, d, (layer.steps + 1, layer.batch, layer.hidden),
                      (lambda b, j: 0.0) if h0 is None else (lambda b, j: h0.at([d, b, j])), step)
        return [lambda s, b, j: state[s, b, j]]

    _outputs(imp, node, layer, [direction(d) for d in range(len(layer.reverse))])


@op("LSTM")
def lstm(imp: Importer, node: onnx.NodeProto) -> None:
    layer = _layer(imp, node)
    h0, c0, peep = imp.optional(node, 5), imp.optional(node, 6), imp.optional(node, 7)
    hidden = layer.hidden

    def direction(d):
        def gate(g, t, b, j):
            return layer.xw.at([layer.time(d, t), d, g, b, j]) + \
                layer.recurrent(d, g, j, lambda m: state[t - 1, 1, b, m])

        def peephole(k, j, c):  # P holds i, o, f
            return 0.0 if peep is None else peep.at([d, k * hidden + j]) * c

        def step(t, s, b, j):
            previous = state[t - 1, 0, b, j]
            forget = pw.sigmoid(gate(_LSTM_F, t, b, j) + peephole(2, j, previous))
            keep = pw.sigmoid(gate(_LSTM_I, t, b, j) + peephole(0, j, previous))
            c = forget * previous + keep * pw.tanh(gate(_LSTM_C, t, b, j))
            out = pw.sigmoid(gate(_LSTM_O, t, b, j) + peephole(1, j, c))
            return pw.where(s == 0, c, out * pw.tanh(c))

        def init(s, b, j):
            if c0 is None and h0 is None:
                return 0.0
            return pw.where(s == 0, 0.0 if c0 is None else c0.at([d, b, j]), 0.0 if h0 is None else h0.at([d, b, j]))

        state = _scan(imp, node, d, (layer.steps + 1, 2, layer.batch, hidden), init, step)
        return [lambda s, b, j: state[s, 1, b, j], lambda s, b, j: state[s, 0, b, j]]

    _outputs(imp, node, layer, [direction(d) for d in range(len(layer.reverse))])


@op("GRU")
def gru(imp: Importer, node: onnx.NodeProto) -> None:
    layer = _layer(imp, node)
    linear_before_reset = int(attribute(node, "linear_before_reset", 0))
    h0 = imp.optional(node, 5)

    def direction(d):
        def gate(g, t, b, j):  # sig(W_g x_t + R_g h_{t-1} + Wb_g + Rb_g) (z and r: both biases in xw)
            return pw.sigmoid(layer.xw.at([layer.time(d, t), d, g, b, j])
                              + layer.recurrent(d, g, j, lambda m: state[t - 1, b, m]))

        def step(t, b, j):
            z, reset = gate(_GRU_Z, t, b, j), gate(_GRU_R, t, b, j)
            if linear_before_reset:
                scaled = reset * (layer.recurrent(d, _GRU_H, j, lambda m: state[t - 1, b, m])
                                  + layer.recurrent_bias(d, _GRU_H, j))
            else:
                scaled = layer.recurrent(d, _GRU_H, j, lambda m: gate(_GRU_R, t, b, m) * state[t - 1, b, m]) \
                    + layer.recurrent_bias(d, _GRU_H, j)
            n = pw.tanh(layer.xw.at([layer.time(d, t), d, _GRU_H, b, j]) + scaled)
            return (1.0 - z) * n + z * state[t - 1, b, j]

        state = _scan(imp, node, d, (layer.steps + 1, layer.batch, layer.hidden),
                      (lambda b, j: 0.0) if h0 is None else (lambda b, j: h0.at([d, b, j])), step)
        return [lambda s, b, j: state[s, b, j]]

    _outputs(imp, node, layer, [direction(d) for d in range(len(layer.reverse))])


def _layer(imp: Importer, node: onnx.NodeProto) -> _Layer:
    """The node's inputs, checked, and its input projection; refuses what the scans do not compute."""
    gates = _GATES[node.op_type]
    x, w, r, bias = imp.value(node, 0), imp.value(node, 1), imp.value(node, 2), imp.optional(node, 3)
    if len(node.input) > 4 and node.input[4] and not _full_lengths(imp, node, x.shape):
        refuse(node, "sequence_lens", node.input[4], "absent, or every sequence of full length")
    direction = text_attribute(node, "direction", "forward")
    if direction not in _DIRECTIONS:
        refuse(node, "direction", direction, " or ".join(_DIRECTIONS))
    activations = attribute(node, "activations")
    names = None if activations is None else [a.decode() if isinstance(a, bytes) else a for a in activations]
    if names is not None and names != _DEFAULT_ACTIVATIONS[node.op_type] * len(_DIRECTIONS[direction]):
        refuse(node, "activations", activations, ", ".join(_DEFAULT_ACTIVATIONS[node.op_type]))
    for name in ("clip", "input_forget", "layout"):
        if attribute(node, name) not in (None, 0):
            refuse(node, name, attribute(node, name), "absent or 0")
    if len(x.shape) != 3:
        raise WorkloadError(f"{describe(node)}: X of shape {x.shape}; (sequence, batch, inputs) is needed")
    inputs, count = x.shape[2], len(_DIRECTIONS[direction])
    hidden = int(attribute(node, "hidden_size", r.shape[-1]))
    if w.shape != (count, gates * hidden, inputs) or r.shape != (count, gates * hidden, hidden):
        raise WorkloadError(f"{describe(node)}: W {w.shape} and R {r.shape} do not fit X {x.shape} and hidden_size "
                            f"{hidden}: expected ({count}, {gates * hidden}, {inputs}) and "
                            f"({count}, {gates * hidden}, {hidden})")
    k = pw.reduce_axis(inputs, "k")
    # GRU's z and r gates, and every other layer's, take Rb in the projection; GRU's h gate adds it itself
    in_projection = _GRU_H if node.op_type == "GRU" else gates

    def projection(t, d, g, b, j):
        row = g * hidden + j
        total = pw.sum(x.at([t, b, k]) * w.at([d, row, k]), k)
        if bias is None:
            return total
        rb = bias.at([d, gates * hidden + row])
        return total + bias.at([d, row]) + (rb if in_projection == gates else pw.where(g < in_projection, rb, 0.0))

    xw = imp.compute(node, (x.shape[0], count, gates, x.shape[1], hidden), projection, part="projection")
    return _Layer(x, w, r, bias, hidden, _DIRECTIONS[direction], xw, gates)


def _outputs(imp: Importer, node: onnx.NodeProto, layer: _Layer, states: list[list[Callable[..., object]]]) -> None:
    """Y (every time's h, per direction), then the last h and (LSTM) the last c, for each output the
    node names; `states[d][0](s, b, j)` is direction d's h after its step s, `[1]` its c."""
    steps = layer.steps

    def per_direction(pick: Callable[[int], Expr], d: Expr) -> Expr:
        found = pick(len(states) - 1)
        for k in reversed(range(len(states) - 1)):
            found = pw.where(d == k, pick(k), found)
        return found

    def step_at(k: int, t: Expr) -> Expr:
        return steps - t if layer.reverse[k] else t + 1

    outputs = [((steps, len(states), layer.batch, layer.hidden),
                lambda t, d, b, j: per_direction(lambda k: states[k][0](step_at(k, t), b, j), d))]
    outputs += [((len(states), layer.batch, layer.hidden),
                 lambda d, b, j, n=n: per_direction(lambda k: states[k][n](steps, b, j), d))
                for n in range(len(states[0]))]
    for n, (shape, fn) in enumerate(outputs):
        if len(node.output) > n and node.output[n]:
            imp.compute(node, shape, fn, output=n)


def _full_lengths(imp: Importer, node: onnx.NodeProto, shape: tuple[int, ...]) -> bool:
    """Whether a constant sequence_lens gives every sequence the whole length (as torch exports it)."""
    return bool((imp.array(node, 4, "sequence_lens") == shape[0]).all())  # (ValueNeeded for a graph input)
