"""AutoScheduler (issue 6, being built): tuning records so far (records.py)."""

from ptowsp.autoschedule.records import TrialRecord, best

__all__ = ["TrialRecord", "best"]
