"""TfIdfVectorizer over integer tokens against onnx's reference: every mode, trigrams with skips,
unigrams counted once, a pool length left out of the counted range, 1-D and 2-D input."""

from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as TP
from onnx.reference import ReferenceEvaluator

import ptowsp as pw
from tests.frontend.test_onnx import model

# unigrams 2, 3, 5; bigrams (5, 6), (7, 8), (6, 7); trigrams (1, 3, 7), (3, 3, 3)
POOL = {"pool_int64s": [2, 3, 5, 5, 6, 7, 8, 6, 7, 1, 3, 7, 3, 3, 3], "ngram_counts": [0, 3, 9],
        "ngram_indexes": [7, 0, 2, 1, 5, 3, 6, 4], "weights": [0.5, 1.5, 2.0, 0.25, 3.0, 1.0, 0.75, 4.0]}


@pytest.mark.parametrize("mode, lengths, skip, shape", [
    ("TF", (1, 3), 2, (2, 12)), ("IDF", (1, 3), 2, (2, 12)), ("TFIDF", (1, 3), 2, (2, 12)), ("TF", (2, 3), 0, (12,)),
    ("TFIDF", (1, 1), 3, (2, 12)), ("IDF", (3, 3), 1, (12,)), ("TF", (3, 3), 1, (2, 12))])
def test_matches_onnx_reference(mode, lengths, skip, shape):
    node = oh.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lengths[0],
                        max_gram_length=lengths[1], max_skip_count=skip, **POOL)
    m = model([node], {"x": (shape, TP.INT64)}, {"y": (None, TP.FLOAT)}, opset=9)
    x = np.random.default_rng(sum(lengths) + skip).choice([1, 2, 3, 5, 6, 7, 8], shape).astype(np.int64)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    wl = pw.frontend.from_onnx(m)
    for got in (pw.reference(wl, x=x), pw.build(wl, "cpu").run(x=x)):
        np.testing.assert_array_equal(got["y"], want)


def test_a_string_pool_is_refused_as_out_of_scope():
    node = oh.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                        max_skip_count=0, pool_strings=["a", "b"], ngram_counts=[0], ngram_indexes=[0, 1])
    m = model([node], {"x": ((3,), TP.INT64)}, {"y": (None, TP.FLOAT)}, opset=9)
    with pytest.raises(pw.WorkloadError, match=r"op TfIdfVectorizer: string n-grams are not supported"):
        pw.frontend.from_onnx(m)
