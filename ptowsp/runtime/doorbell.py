"""A doorbell: a token queue that holds at most one token, meaning "look again".

A process with nothing to do waits on its doorbell; whoever gives it
something to look at (a ready task, a freed window slot, the end of the run)
rings it.  Ringing wakes the waiting process, or leaves one token for its
next wait, so a ring between its look and its wait is never lost; rings in
between add nothing.  The waiter looks again after every wake-up, so a ring
that finds a token already there may be dropped.  Both clocks' executors
park their idle processes on doorbells (executor.py, device.py).
"""

from __future__ import annotations

from ptowsp.runtime.csp import DepQueue


class Doorbell:
    def __init__(self, name: str):
        self.tokens = DepQueue(name)
        self.rung = False

    def ring(self) -> None:
        if not self.rung:
            self.rung = True
            self.tokens.push_dep()

    notify = close = ring  # stands where a condition variable would; the waiter sees the end itself

    async def wait(self) -> None:
        await self.tokens.pop_dep()
        self.rung = False
