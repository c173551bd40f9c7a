"""Pool threads that wait for the next native run in native code, not in Python.

Why: a native run (native.py) needs its helper threads in the loop as soon
as the caller is.  A pool thread parked in Python takes 40-60 us on this VM
to wake, and then the GIL before it can call the loop, so a run of a few
short tasks started on one core (docs/performance.md and its git history).  OpenMP and oneDNN
keep their threads spinning after a parallel region for the same reason;
these threads nap instead (below).  After its first native run a pool
thread *sits*: it calls `ptowsp_crew_serve`, native code that waits on its
mailbox without the GIL:

- between runs it naps: it looks at its mailbox every 50 us (a
  `nanosleep`) for 50 ms after its last run, then sleeps on a futex.  A run
  *rouses* it as its set-up begins (`rouse`: a flag, and a futex wake only
  if it sleeps), so it is awake and spinning (up to 0.2 ms) when the offer
  comes.  Why not a futex at once: waking a thread asleep on a futex cost
  the caller a 40 us system call on this VM (the wake-up's interrupt to the
  other core), in every run.  Why not spin between runs, as OpenMP's threads
  do: beside another library's busy-waiting threads (OpenBLAS's, after a
  numpy matmul) a thread that has just spun is not preferred by the kernel's
  scheduler, and the next offer waited a whole time slice for it
  (milliseconds: the run ended without it); a thread back from a nap or a
  futex is (docs/performance.md and its git history);
- `offer` puts a run's buffer in the mailbox and rings the futex if the
  thread sleeps; the thread claims the offer (a compare-and-swap), runs its
  worker of the loop, and counts itself out in the buffer's EXITED slot;
- `withdraw` takes an offer back if the thread has not claimed it: a
  caller that finished the table alone does not wait for a sleeping
  helper to wake up just to see that;
- `stand` (a quit epoch in the mailbox) sends the thread back to Python, to
  run the Python functions it is given (service.py calls it before any).

Linux only (futex), on x86-64 and arm64, whose futex syscall numbers are known.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import time

import numpy as np

from ptowsp.once import once
from ptowsp.runtime import native
from ptowsp.runtime.native_ir import EXITED, NOW_IR, compile_ir

# mailbox slots (int64): the offered run's sequence number (0: none), its buffer, its worker index,
# whether the thread sleeps on the futex, the quit epoch, the futex word (an int32 in the low half),
# how many times the thread left native code, and whether a run is coming (set by `rouse`)
OFFER, BUFFER, WORKER, SLEEPING, QUIT, BELL, LEFT, ROUSED = range(8)
MAILBOX = 16  # int64 slots: a mailbox fills two cache lines of its own
SYS_FUTEX = {"x86_64": 202, "aarch64": 98}
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129

ROUSED_NS = 200_000  # a roused thread spins this long for the offer (a run's set-up takes 50-100 us)
NAP_NS = 50_000  # between runs a thread naps this long between looks at its mailbox ...
NAPPING_NS = 50_000_000  # ... for this long after its last run, then sleeps on the futex
LEAVE_WAIT = 0.1  # seconds `stand(wait=True)` waits for the thread to leave native code


@once
def supported() -> str | None:
    """Why pool threads cannot wait in native code on this host, or None."""
    reason = native.supported()
    if reason is None and platform.machine() not in SYS_FUTEX:
        reason = f"the crew sleeps on a futex, whose syscall number is not known for {platform.machine()}"
    return reason


def _crew_ir(futex: int, x86: bool) -> str:
    pause = "call void @llvm.x86.sse2.pause()" if x86 else ""
    declare_pause = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    return f"""
declare i64 @syscall(i64, ...)
declare i32 @nanosleep(ptr, ptr)
{declare_pause}
{NOW_IR}

define internal ptr @at(ptr %box, i64 %k) {{
  %p = getelementptr i64, ptr %box, i64 %k
  ret ptr %p
}}

; wake the thread if it sleeps (after the caller's seq_cst store of an offer or a quit)
define internal void @ring(ptr %box) {{
entry:
  %sp = call ptr @at(ptr %box, i64 {SLEEPING})
  %s = load atomic i64, ptr %sp seq_cst, align 8
  %asleep = icmp ne i64 %s, 0
  br i1 %asleep, label %wake, label %done
wake:
  %bp = call ptr @at(ptr %box, i64 {BELL})
  atomicrmw add ptr %bp, i32 1 seq_cst
  call i64 (i64, ...) @syscall(i64 {futex}, ptr %bp, i64 {FUTEX_WAKE_PRIVATE}, i64 1)
  br label %done
done:
  ret void
}}

define void @ptowsp_crew_offer(ptr %box, i64 %buffer, i64 %w, i64 %seq) {{
  %bp = call ptr @at(ptr %box, i64 {BUFFER})
  store i64 %buffer, ptr %bp
  %wp = call ptr @at(ptr %box, i64 {WORKER})
  store i64 %w, ptr %wp
  %op = call ptr @at(ptr %box, i64 {OFFER})
  store atomic i64 %seq, ptr %op seq_cst, align 8
  call void @ring(ptr %box)
  ret void
}}

; 1: offer %seq taken back before the thread claimed it; 0: the thread claimed it
define i64 @ptowsp_crew_withdraw(ptr %box, i64 %seq) {{
  %op = call ptr @at(ptr %box, i64 {OFFER})
  %pair = cmpxchg ptr %op, i64 %seq, i64 0 seq_cst seq_cst
  %won = extractvalue {{i64, i1}} %pair, 1
  %r = zext i1 %won to i64
  ret i64 %r
}}

; a run is about to be offered: wake the thread now, so that its wake-up overlaps the run's set-up
define void @ptowsp_crew_rouse(ptr %box) {{
  %rp = call ptr @at(ptr %box, i64 {ROUSED})
  store atomic i64 1, ptr %rp seq_cst, align 8
  call void @ring(ptr %box)
  ret void
}}

define void @ptowsp_crew_quit(ptr %box, i64 %epoch) {{
  %qp = call ptr @at(ptr %box, i64 {QUIT})
  store atomic i64 %epoch, ptr %qp seq_cst, align 8
  call void @ring(ptr %box)
  ret void
}}

; wait for offers and run them on %loop (native.py's worker) until the quit epoch reaches %epoch
define void @ptowsp_crew_serve(ptr %box, i64 %epoch, ptr %loop) {{
entry:
  %qp = call ptr @at(ptr %box, i64 {QUIT})
  %op = call ptr @at(ptr %box, i64 {OFFER})
  %sp = call ptr @at(ptr %box, i64 {SLEEPING})
  %bellp = call ptr @at(ptr %box, i64 {BELL})
  %rp = call ptr @at(ptr %box, i64 {ROUSED})
  %until = alloca i64  ; roused for a run about to come: spin for its offer until then
  store i64 0, ptr %until
  %last = alloca i64  ; the end of the last run (or the start): nap until NAPPING_NS after it
  %t0 = call i64 @now()
  store i64 %t0, ptr %last
  %ts = alloca {{i64, i64}}
  br label %look

look:
  %q = load atomic i64, ptr %qp seq_cst, align 8
  %quit = icmp sge i64 %q, %epoch
  br i1 %quit, label %leave, label %offer
offer:
  %o = load atomic i64, ptr %op seq_cst, align 8
  %some = icmp sgt i64 %o, 0
  br i1 %some, label %claim, label %idle
idle:
  %t = call i64 @now()
  %u = load i64, ptr %until
  %keen = icmp slt i64 %t, %u
  br i1 %keen, label %spin, label %roused
spin:
  {pause}
  br label %look
roused:
  %r = atomicrmw xchg ptr %rp, i64 0 seq_cst
  %called = icmp ne i64 %r, 0
  br i1 %called, label %keep, label %nap
keep:
  %u1 = add i64 %t, {ROUSED_NS}
  store i64 %u1, ptr %until
  br label %look
nap:
  %l = load i64, ptr %last
  %since = sub i64 %t, %l
  %recent = icmp slt i64 %since, {NAPPING_NS}
  br i1 %recent, label %doze, label %sleep
doze:
  store i64 0, ptr %ts
  %tsn = getelementptr {{i64, i64}}, ptr %ts, i32 0, i32 1
  store i64 {NAP_NS}, ptr %tsn
  call i32 @nanosleep(ptr %ts, ptr null)
  br label %look
claim:
  %pair = cmpxchg ptr %op, i64 %o, i64 0 seq_cst seq_cst
  %won = extractvalue {{i64, i1}} %pair, 1
  br i1 %won, label %run, label %look
run:
  %bp = call ptr @at(ptr %box, i64 {BUFFER})
  %buffer = load ptr, ptr %bp
  %wp = call ptr @at(ptr %box, i64 {WORKER})
  %w = load i64, ptr %wp
  call i64 %loop(ptr %buffer, i64 %w, i64 0)
  %ep = getelementptr i64, ptr %buffer, i64 {EXITED}
  atomicrmw add ptr %ep, i64 1 release
  store i64 0, ptr %until
  %t1 = call i64 @now()
  store i64 %t1, ptr %last
  br label %look

; announce the sleep, look once more (an offer made before the announcement was seen), then sleep
sleep:
  %bell = load atomic i32, ptr %bellp seq_cst, align 4
  store atomic i64 1, ptr %sp seq_cst, align 8
  %q2 = load atomic i64, ptr %qp seq_cst, align 8
  %o2 = load atomic i64, ptr %op seq_cst, align 8
  %r2 = load atomic i64, ptr %rp seq_cst, align 8
  %quit2 = icmp sge i64 %q2, %epoch
  %some2 = icmp sgt i64 %o2, 0
  %called2 = icmp ne i64 %r2, 0
  %awake0 = or i1 %quit2, %some2
  %awake = or i1 %awake0, %called2
  br i1 %awake, label %woken, label %wait
wait:
  %bell64 = zext i32 %bell to i64
  call i64 (i64, ...) @syscall(i64 {futex}, ptr %bellp, i64 {FUTEX_WAIT_PRIVATE}, i64 %bell64, ptr null)
  br label %woken
woken:
  store atomic i64 0, ptr %sp seq_cst, align 8
  br label %look

leave:
  %lp = call ptr @at(ptr %box, i64 {LEFT})
  atomicrmw add ptr %lp, i64 1 seq_cst
  ret void
}}
"""


class _Crew:
    """The compiled mailbox functions, and the engine that keeps their code alive."""

    def __init__(self) -> None:
        self.engine = compile_ir(lambda triple: _crew_ir(SYS_FUTEX[platform.machine()], x86=triple.startswith("x86_64")))
        i64, ptr = ctypes.c_int64, ctypes.c_void_p

        def function(name, result, *arguments):
            return ctypes.CFUNCTYPE(result, *arguments)(self.engine.get_function_address(name))

        self.offer = function("ptowsp_crew_offer", None, ptr, i64, i64, i64)
        self.withdraw = function("ptowsp_crew_withdraw", i64, ptr, i64)
        self.quit = function("ptowsp_crew_quit", None, ptr, i64)
        self.rouse = function("ptowsp_crew_rouse", None, ptr)
        self.serve = function("ptowsp_crew_serve", None, ptr, i64, ptr)
        self.loop = native.worker_address()


@once
def _crew() -> _Crew:
    return _Crew()


class Seat:
    """One pool thread's place in native code: its mailbox, and whether the thread sits there now.
    Only the run the thread is lent to calls `offer`, `withdraw` and `stand` (service.py)."""

    def __init__(self) -> None:
        self.box = np.zeros(MAILBOX, np.int64)
        self.address = self.box.ctypes.data
        self.epoch = 0  # the sitting's number: `stand` ends sittings up to it
        self.sitting = False
        self.seq = 0  # the last offer's number

    def offer(self, start, buffer: int, w: int) -> None:
        """Offer worker w of the run whose native buffer is at `buffer`; `start(fn)` runs fn on the thread
        (the first offer seats it)."""
        crew = _crew()
        if not self.sitting:
            self.epoch += 1
            self.sitting = True
            start(functools.partial(crew.serve, self.address, self.epoch, crew.loop))  # ctypes drops the GIL
        self.seq += 1
        crew.offer(self.address, buffer, w, self.seq)

    def withdraw(self) -> bool:
        """Take the last offer back: True if the thread had not claimed it (it will not run it).
        A claim clears the offer's slot, as a withdraw does: a slot that no longer holds this offer
        is read without the atomic call (a ctypes call after a run that streamed megabytes costs
        10-15 us of cold caches)."""
        if self.box[OFFER] != self.seq:
            return False
        return bool(_crew().withdraw(self.address, self.seq))

    def rouse(self) -> None:
        """A run will be offered in a moment: wake the thread now, if it sits asleep."""
        if self.sitting:
            _crew().rouse(self.address)

    def stand(self, wait: bool = False) -> None:
        """Send the thread back to Python (after the run it may be in); `wait`: until it has left native
        code (at the interpreter's exit, before the code it runs is freed), at most LEAVE_WAIT seconds."""
        if not self.sitting:
            return
        self.sitting = False
        left = int(self.box[LEFT])
        _crew().quit(self.address, self.epoch)
        deadline = time.monotonic() + LEAVE_WAIT
        while wait and self.box[LEFT] == left and time.monotonic() < deadline:
            time.sleep(1e-4)
