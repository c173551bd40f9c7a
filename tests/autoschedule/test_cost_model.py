"""The XGBoost cost model: learns a ranking from features, on one scale across workloads."""

from __future__ import annotations

import numpy as np
import pytest

from ptowsp.autoschedule import records
from ptowsp.autoschedule.cost_model import CostModel, normalised_throughput
from ptowsp.autoschedule.features import FEATURE_NAMES, FEATURE_SET
from ptowsp.autoschedule.tuner import _prior
from ptowsp.workloads import zoo


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_normalised_throughput_is_per_workload_and_failures_score_zero():
    y = normalised_throughput([2.0, 1.0, None, 10.0, 40.0], ["a", "a", "a", "b", "b"])
    np.testing.assert_allclose(y, [0.5, 1.0, 0.0, 1.0, 0.25])


def test_the_model_ranks_unseen_candidates():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 4, size=(240, 12))
    seconds = np.exp(0.8 * X[:, 0] - 0.5 * X[:, 3] + 0.3 * X[:, 0] * X[:, 5] + 0.05 * rng.standard_normal(240))
    model = CostModel(seed=0).fit(X[:160], list(seconds[:160]), ["w"] * 160)
    predicted = model.predict(X[160:])
    assert _spearman(predicted, -seconds[160:]) > 0.8  # higher prediction = faster
    shuffled = CostModel(seed=0).fit(X[:160], list(rng.permutation(seconds[:160])), ["w"] * 160)
    assert abs(_spearman(shuffled.predict(X[160:]), -seconds[160:])) < 0.4  # it learned, not guessed


def test_nothing_to_learn_leaves_the_model_untrained():
    model = CostModel().fit(np.ones((3, 4)), [1.0, 1.0, 1.0], ["w"] * 3)
    assert not model.trained
    with pytest.raises(Exception, match="before a successful fit"):
        model.predict(np.ones((1, 4)))


def test_warm_start_takes_other_workloads_records_with_features(tmp_path):
    this, other = zoo.matmul(32, 32, 32), zoo.matmul(64, 64, 64)
    features = [0.5] * len(FEATURE_NAMES)
    log = tmp_path / "other.jsonl"
    def trial(wl, n, seconds, **more):
        return records.TrialRecord.of(wl.schedule(), "cpu", n, seconds, **more)

    records.append(log, [trial(other, 0, 1.0, features=features, feature_set=FEATURE_SET),
                         trial(other, 1, None, error="crash", features=features, feature_set=FEATURE_SET),
                         trial(other, 2, 2.0),  # no features: unusable
                         trial(other, 3, 2.0, features=features, feature_set="v0:3"),  # another definition
                         trial(this, 4, 1.0, features=features, feature_set=FEATURE_SET)])  # itself
    feats, seconds, groups = _prior(log, this.fingerprint)
    assert seconds == [1.0, None] and groups == [other.fingerprint] * 2 and len(feats[0]) == len(FEATURE_NAMES)
