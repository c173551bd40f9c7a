"""AutoScheduler: space (space.py) -> features (features.py) -> XGBoost cost model (cost_model.py)
-> simulated annealing (tuner.py; a whole model task by task, model_search.py) -> measurement in a
worker process (measure.py), or on a dask cluster's workers (dask_runner.py) -> records (records.py, JSON
lines)."""

from ptowsp.autoschedule.dask_runner import DaskRunner
from ptowsp.autoschedule.records import TrialRecord, best
from ptowsp.autoschedule.result import SearchResult
from ptowsp.autoschedule.search import AutoScheduler
from ptowsp.autoschedule.space import Knob, Space

__all__ = ["AutoScheduler", "DaskRunner", "Knob", "SearchResult", "Space", "TrialRecord", "best"]
