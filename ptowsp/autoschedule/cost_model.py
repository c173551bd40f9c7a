"""The cost model: XGBoost regression from program features to normalised throughput.

The target of a measured candidate is `best seconds / its seconds` among
the trials of its workload (1 for the fastest, 0 for a failed one), so
records of different workloads share one scale and a model can warm-start
on other workloads' logs.  Only the ranking of predictions matters to the
search; regression on this scale ranks well and needs no query groups.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ptowsp.errors import PtowspError

ROUNDS = 80  # boosting rounds: enough for a few hundred records, fast to retrain every batch
PARAMS = {"objective": "reg:squarederror", "max_depth": 6, "eta": 0.2, "subsample": 1.0,
          "min_child_weight": 1.0, "nthread": 1, "verbosity": 0}
# Trees predict a constant beyond the data they saw, so a region better than every measured point
# looks merely as good as the best.  A linear booster beside them extrapolates the trend and breaks
# those ties towards it.
LINEAR = {"booster": "gblinear", "objective": "reg:squarederror", "lambda": 1.0, "alpha": 0.0, "nthread": 1,
          "verbosity": 0, "updater": "coord_descent", "feature_selector": "cyclic"}
LINEAR_ROUNDS = 50
LINEAR_WEIGHT = 0.5


def normalised_throughput(seconds: Sequence[float | None], groups: Sequence[str]) -> np.ndarray:
    """best / seconds within each group (a workload's fingerprint); failed trials score 0."""
    best: dict[str, float] = defaultdict(lambda: float("inf"))
    for s, g in zip(seconds, groups):
        if s is not None:
            best[g] = min(best[g], s)
    return np.array([0.0 if s is None else best[g] / s for s, g in zip(seconds, groups)])


class CostModel:
    """Predicts how fast a candidate runs, relative to the best seen for its workload (higher is faster)."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._booster = self._linear = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def fit(self, features: np.ndarray, seconds: Sequence[float | None], groups: Sequence[str]) -> CostModel:
        """Retrain from scratch on every record so far (cheap at tuning sizes, and order-independent)."""
        import xgboost as xgb

        y = normalised_throughput(seconds, groups)
        if len(y) < 2 or np.ptp(y) == 0:
            self._booster = None  # nothing to learn from yet: the search samples at random
            return self
        data = xgb.DMatrix(np.asarray(features, dtype=np.float32), label=y)
        self._booster = xgb.train({**PARAMS, "seed": self.seed}, data, num_boost_round=ROUNDS)
        self._linear = xgb.train({**LINEAR, "seed": self.seed}, data, num_boost_round=LINEAR_ROUNDS)
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        if self._booster is None:
            raise PtowspError("CostModel.predict before a successful fit")
        import xgboost as xgb

        data = xgb.DMatrix(np.asarray(features, dtype=np.float32))
        return self._booster.predict(data) + LINEAR_WEIGHT * self._linear.predict(data)
