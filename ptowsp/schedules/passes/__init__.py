"""Graph passes between the schedule and lowering: category fusion (fusion.py)."""
