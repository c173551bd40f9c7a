"""Graph passes between the schedule and lowering: category fusion (fusion.py), constant folding
(fold.py), the default schedule (default.py) and static memory planning (memory.py)."""
