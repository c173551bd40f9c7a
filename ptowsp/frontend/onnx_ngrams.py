"""ONNX's TfIdfVectorizer over integer tokens: how often each n-gram of the model's pool occurs in each
row, weighted by mode (TF: the count; IDF: the weight where it occurs; TFIDF: the weight times the
count; weights are read per output place, as onnx's reference and onnxruntime read them).

An n-gram of length n with skip distance d is the tokens at s, s + d, ..., s + (n - 1) d of a row;
n-grams of length 2 and more are counted for every d from 1 to max_skip_count + 1, unigrams once (as
onnx's reference counts them).  The pool is a constant table (pool.at([j, m]): token m of n-gram j, its
length n_j), so one task counts every n-gram of the pool over (d, s) at once, the n-gram's tokens
compared in an unrolled product; a second maps the pool's n-grams to their output places
(ngram_indexes).  String pools are out of scope, as every string tensor.
"""

from __future__ import annotations

import numpy as np
import onnx

import ptowsp as pw
from ptowsp.errors import WorkloadError
from ptowsp.frontend.onnx_graph import attribute, describe, text_attribute
from ptowsp.frontend.onnx_importer import Importer
from ptowsp.frontend.onnx_ops import op, refuse


def _pool(node: onnx.NodeProto, low: int, high: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens j x high, zero-padded; lengths; positions in the pool's order) of the pool's n-grams of
    lengths low..high; n-grams of other lengths keep their place in the numbering but are not counted."""
    pool = [int(t) for t in attribute(node, "pool_int64s", [])]
    starts = [int(c) for c in attribute(node, "ngram_counts", [])]
    rows, lengths, places, place = [], [], [], 0
    for n, start in enumerate(starts, start=1):
        end = starts[n] if n < len(starts) else len(pool)
        for first in range(start, end - n + 1, n):
            if low <= n <= high:
                rows.append(pool[first:first + n] + [0] * (high - n))
                lengths.append(n)
                places.append(place)
            place += 1
    return (np.array(rows, np.int64).reshape(-1, high), np.array(lengths, np.int64), np.array(places, np.int64))


@op("TfIdfVectorizer")
def tfidf_vectorizer(imp: Importer, node: onnx.NodeProto) -> None:
    x = imp.value(node, 0)
    if attribute(node, "pool_strings") is not None or np.dtype(x.dtype).kind not in "iu":
        raise WorkloadError(f"{describe(node)}: string n-grams are not supported (string tensors are out of scope); "
                            "integer tokens with pool_int64s are")
    if len(x.shape) not in (1, 2) or not all(isinstance(d, int) for d in x.shape):
        raise WorkloadError(f"{describe(node)}: input of shape {x.shape}; a static [C] or [N, C] is needed")
    mode = text_attribute(node, "mode", "TF")
    if mode not in ("TF", "IDF", "TFIDF"):
        refuse(node, "mode", mode, "TF, IDF or TFIDF")
    low, high = int(attribute(node, "min_gram_length")), int(attribute(node, "max_gram_length"))
    skips = int(attribute(node, "max_skip_count")) + 1
    indexes = [int(i) for i in attribute(node, "ngram_indexes")]
    weights = attribute(node, "weights")
    tokens, lengths, places = _pool(node, low, high)
    if places.size and places.max() >= len(indexes):
        raise WorkloadError(f"{describe(node)}: the pool holds {places.max() + 1} n-grams, ngram_indexes only "
                            f"{len(indexes)}")
    rows = x.shape[0] if len(x.shape) == 2 else 1
    width = x.shape[-1]
    name = node.name or "tfidf"
    for what, array in (("tokens", tokens), ("lengths", lengths)):
        imp.constant(f"{name}_{what}", array)
    pool, length = imp.lookup(f"{name}_tokens"), imp.lookup(f"{name}_lengths")
    row = (lambda b, i: x.at([b, i])) if len(x.shape) == 2 else (lambda b, i: x.at([i]))
    d, s = pw.reduce_axis(skips, "d"), pw.reduce_axis(width, "s")

    def count(b, j):
        n, step = length.at([j]), d + 1
        fits = (s + (n - 1) * step < width) & ((n > 1) | (d == 0))  # (unigrams once)
        match = fits
        for m in range(high):
            at = pw.minimum(s + m * step, width - 1)
            match = match & ((m >= n) | (pw.cast(row(b, at), "int64") == pool.at([j, m])))
        return pw.sum(pw.where(match, 1, 0), (d, s))
    out = max(indexes) + 1 if indexes else 0
    shape = (rows, out) if len(x.shape) == 2 else (out,)
    if not len(lengths):  # no n-gram of the lengths counted: zeros
        imp.compute(node, shape, lambda *i: pw.cast(0, "float32"))
        return
    counts = imp.compute(node, (rows, len(lengths)), count, part="counts")
    # weighted by output place, as onnx's reference and onnxruntime read `weights`
    weight = np.array(weights if weights is not None else [1.0] * out, np.float32)
    if weight.size < out:
        raise WorkloadError(f"{describe(node)}: {weight.size} weights for {out} output places")
    # the counted n-grams that land on each output place (-1: none more), usually one
    landing = [[j for j, p in enumerate(places) if indexes[p] == k] for k in range(out)]
    table = np.full((out, max(1, max(map(len, landing)))), -1, np.int64)
    for k, found in enumerate(landing):
        table[k, :len(found)] = found
    imp.constant(f"{name}_landing", table)
    imp.constant(f"{name}_weights", weight)
    lands, weighs = imp.lookup(f"{name}_landing"), imp.lookup(f"{name}_weights")
    r = pw.reduce_axis(table.shape[1], "r")

    def value(b, k):
        j = pw.maximum(lands.at([k, r]), 0)
        c, w = pw.cast(counts.at([b, j]), "float32"), weighs.at([k])
        term = c if mode == "TF" else pw.where(c > 0, w, 0.0) if mode == "IDF" else c * w
        return pw.sum(pw.where(lands.at([k, r]) >= 0, term, 0.0), r)
    imp.compute(node, shape, value if len(x.shape) == 2 else (lambda k: value(0, k)))
