"""The native loop's code and the layout of the buffer it works on (native.py runs them).

The loop is LLVM IR text: the state slots, a cache line per worker, and the
policy's constants below are read by that text and by the Python that fills
and reads the buffer, so both take them from here.  `compile_ir` is the JIT
step native.py and crew.py share.
"""

from __future__ import annotations

# the state array: one int64 per slot, addresses of the arrays below as integers
# (EXITED: helper threads that have left the loop, counted by crew.py; WINDOW: how many instances
# are admitted but not retired at most, in table order; SIGNALS: the address of an int64 that a
# signal with a Python handler makes nonzero (stops.SignalWord), or 0; SLICE: while it is zero, how
# much later than a passed deadline the next one falls, in nanoseconds)
N, WORKERS, COMPLETED, STOP, THUNKS, OFFSETS, ARGUMENTS, POINTERS, SUCC_START, SUCC, REMAINING, \
    QUEUES, META, RECORDS, WAITS, EXITED, WINDOW, SIGNALS, SLICE = range(19)
SLOTS = 19
# per worker, one cache line of int64 in META: queue head, queue tail, queue lock, records, idle spans,
# the start of the idle span in progress (-1: none)
HEAD, TAIL, LOCK, RECORDED, WAITED, IDLE_SINCE = range(6)
LINE = 8
SPIN_NS, YIELD_NS, POLL_NS = 200_000, 2_000_000, 100_000
CLOCK_MONOTONIC = 1  # Linux's id
CPU_WORDS = 16  # the lead's affinity masks: 1024 CPUs


# `@now()`: CLOCK_MONOTONIC in nanoseconds, the clock of time.perf_counter on Linux
NOW_IR = """
declare i32 @clock_gettime(i32, ptr)

define internal i64 @now() {
  %ts = alloca {i64, i64}
  call i32 @clock_gettime(i32 CLOCK, ptr %ts)
  %s = load i64, ptr %ts
  %p = getelementptr {i64, i64}, ptr %ts, i32 0, i32 1
  %ns = load i64, ptr %p
  %a = mul i64 %s, 1000000000
  %t = add i64 %a, %ns
  ret i64 %t
}
""".replace("CLOCK", str(CLOCK_MONOTONIC))


def loop_ir(x86: bool) -> str:
    pause = "call void @llvm.x86.sse2.pause()" if x86 else ""
    declare_pause = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    return f"""
declare i32 @sched_yield()
declare i32 @nanosleep(ptr, ptr)
{declare_pause}

{NOW_IR}
; what a skipped instance runs: nothing (its successors are released as after any task)
define void @ptowsp_skip(ptr %pointers, ptr %arguments) {{
  ret void
}}

define internal ptr @slot(ptr %state, i64 %k) {{
  %p = getelementptr i64, ptr %state, i64 %k
  %v = load ptr, ptr %p
  ret ptr %v
}}

define internal ptr @meta(ptr %state, i64 %w, i64 %field) {{
  %m = call ptr @slot(ptr %state, i64 {META})
  %a = mul i64 %w, {LINE}
  %b = add i64 %a, %field
  %p = getelementptr i64, ptr %m, i64 %b
  ret ptr %p
}}

define internal void @lock(ptr %l) {{
entry:
  br label %try
try:
  %old = atomicrmw xchg ptr %l, i64 1 acquire
  %free = icmp eq i64 %old, 0
  br i1 %free, label %done, label %spin
spin:
  {pause}
  %v = load atomic i64, ptr %l monotonic, align 8
  %z = icmp eq i64 %v, 0
  br i1 %z, label %try, label %spin
done:
  ret void
}}

define internal void @unlock(ptr %l) {{
  store atomic i64 0, ptr %l release, align 8
  ret void
}}

; the queue entry k of worker w
define internal ptr @entry(ptr %state, i64 %w, i64 %k) {{
  %n = load i64, ptr %state
  %q = call ptr @slot(ptr %state, i64 {QUEUES})
  %a = mul i64 %w, %n
  %b = add i64 %a, %k
  %p = getelementptr i64, ptr %q, i64 %b
  ret ptr %p
}}

define internal void @push(ptr %state, i64 %w, i64 %i) {{
  %l = call ptr @meta(ptr %state, i64 %w, i64 {LOCK})
  %tp = call ptr @meta(ptr %state, i64 %w, i64 {TAIL})
  call void @lock(ptr %l)
  %t = load i64, ptr %tp
  %e = call ptr @entry(ptr %state, i64 %w, i64 %t)
  store i64 %i, ptr %e
  %t1 = add i64 %t, 1
  store atomic i64 %t1, ptr %tp monotonic, align 8
  call void @unlock(ptr %l)
  ret void
}}

; the newest task of w's own queue, or -1
define internal i64 @pop(ptr %state, i64 %w) {{
entry:
  %l = call ptr @meta(ptr %state, i64 %w, i64 {LOCK})
  %hp = call ptr @meta(ptr %state, i64 %w, i64 {HEAD})
  %tp = call ptr @meta(ptr %state, i64 %w, i64 {TAIL})
  call void @lock(ptr %l)
  %h = load i64, ptr %hp
  %t = load i64, ptr %tp
  %some = icmp sgt i64 %t, %h
  br i1 %some, label %take, label %none
take:
  %t1 = sub i64 %t, 1
  %e = call ptr @entry(ptr %state, i64 %w, i64 %t1)
  %i = load i64, ptr %e
  store atomic i64 %t1, ptr %tp monotonic, align 8
  call void @unlock(ptr %l)
  ret i64 %i
none:
  call void @unlock(ptr %l)
  ret i64 -1
}}

; the oldest task of v's queue, or -1 (an empty queue is seen without its lock)
define internal i64 @steal(ptr %state, i64 %v) {{
entry:
  %l = call ptr @meta(ptr %state, i64 %v, i64 {LOCK})
  %hp = call ptr @meta(ptr %state, i64 %v, i64 {HEAD})
  %tp = call ptr @meta(ptr %state, i64 %v, i64 {TAIL})
  %h0 = load atomic i64, ptr %hp monotonic, align 8
  %t0 = load atomic i64, ptr %tp monotonic, align 8
  %maybe = icmp sgt i64 %t0, %h0
  br i1 %maybe, label %locked, label %empty
locked:
  call void @lock(ptr %l)
  %h = load i64, ptr %hp
  %t = load i64, ptr %tp
  %some = icmp sgt i64 %t, %h
  br i1 %some, label %take, label %none
take:
  %e = call ptr @entry(ptr %state, i64 %v, i64 %h)
  %i = load i64, ptr %e
  %h1 = add i64 %h, 1
  store atomic i64 %h1, ptr %hp monotonic, align 8
  call void @unlock(ptr %l)
  ret i64 %i
none:
  call void @unlock(ptr %l)
  br label %empty
empty:
  ret i64 -1
}}

; one dependency of instance %s met (a producer retired, or its admission): ready at 0, in w's queue
define internal void @count_down(ptr %state, ptr %remaining, i64 %w, i64 %s) {{
entry:
  %cp = getelementptr i64, ptr %remaining, i64 %s
  %old = atomicrmw sub ptr %cp, i64 1 acq_rel
  %ready = icmp eq i64 %old, 1
  br i1 %ready, label %place, label %done
place:
  call void @push(ptr %state, i64 %w, i64 %s)
  br label %done
done:
  ret void
}}

; close w's idle span, if one is open, at time %t
define internal void @end_idle(ptr %state, i64 %w, i64 %t) {{
entry:
  %sp = call ptr @meta(ptr %state, i64 %w, i64 {IDLE_SINCE})
  %since = load i64, ptr %sp
  %open = icmp sge i64 %since, 0
  br i1 %open, label %close, label %done
close:
  %cp = call ptr @meta(ptr %state, i64 %w, i64 {WAITED})
  %c = load i64, ptr %cp
  %n = load i64, ptr %state
  %waits = call ptr @slot(ptr %state, i64 {WAITS})
  %n1 = add i64 %n, 1
  %row = mul i64 %w, %n1
  %k = add i64 %row, %c
  %at = mul i64 %k, 2
  %p0 = getelementptr i64, ptr %waits, i64 %at
  store i64 %since, ptr %p0
  %p1 = getelementptr i64, ptr %p0, i64 1
  store i64 %t, ptr %p1
  %c1 = add i64 %c, 1
  store i64 %c1, ptr %cp
  store i64 -1, ptr %sp
  br label %done
done:
  ret void
}}

; idle for one turn: spin, yield or sleep by how long the idle span has lasted
define internal void @idle(ptr %state, i64 %w, i64 %t) {{
entry:
  %sp = call ptr @meta(ptr %state, i64 %w, i64 {IDLE_SINCE})
  %since = load i64, ptr %sp
  %open = icmp sge i64 %since, 0
  br i1 %open, label %measure, label %start
start:
  store i64 %t, ptr %sp
  br label %spin
measure:
  %d = sub i64 %t, %since
  %short = icmp slt i64 %d, {SPIN_NS}
  br i1 %short, label %spin, label %longer
spin:
  {pause}
  ret void
longer:
  %medium = icmp slt i64 %d, {YIELD_NS}
  br i1 %medium, label %yield, label %sleep
yield:
  call i32 @sched_yield()
  ret void
sleep:
  %ts = alloca {{i64, i64}}
  store i64 0, ptr %ts
  %p = getelementptr {{i64, i64}}, ptr %ts, i32 0, i32 1
  store i64 {POLL_NS}, ptr %p
  call i32 @nanosleep(ptr %ts, ptr null)
  ret void
}}

; past the deadline in %dl at time %t: 1 to go back to the caller (no signal word to look at, or a
; signal has made it nonzero), else 0 with the next deadline stored (the caller's Python is left cold)
define internal i64 @due(ptr %state, ptr %dl, i64 %t) {{
entry:
  %ap = getelementptr i64, ptr %state, i64 {SIGNALS}
  %a = load i64, ptr %ap
  %watched = icmp ne i64 %a, 0
  br i1 %watched, label %peek, label %back
peek:
  %wp = inttoptr i64 %a to ptr
  %v = load atomic i64, ptr %wp monotonic, align 8
  %signalled = icmp ne i64 %v, 0
  br i1 %signalled, label %back, label %later
later:
  %slp = getelementptr i64, ptr %state, i64 {SLICE}
  %slice = load i64, ptr %slp
  %next = add i64 %t, %slice
  store i64 %next, ptr %dl
  ret i64 0
back:
  ret i64 1
}}

; run tasks until the table is done or stopped (0), or until a task ends past %deadline (1; 0: none)
; and the SIGNALS word, if any, is nonzero (else the deadline moves on by SLICE)
define i64 @ptowsp_native_worker(ptr %state, i64 %w, i64 %deadline) {{
entry:
  %n = load i64, ptr %state
  %wp = getelementptr i64, ptr %state, i64 {WORKERS}
  %workers = load i64, ptr %wp
  %completed = getelementptr i64, ptr %state, i64 {COMPLETED}
  %stopp = getelementptr i64, ptr %state, i64 {STOP}
  %thunks = call ptr @slot(ptr %state, i64 {THUNKS})
  %offsets = call ptr @slot(ptr %state, i64 {OFFSETS})
  %arguments = call ptr @slot(ptr %state, i64 {ARGUMENTS})
  %pointers = call ptr @slot(ptr %state, i64 {POINTERS})
  %sstart = call ptr @slot(ptr %state, i64 {SUCC_START})
  %succ = call ptr @slot(ptr %state, i64 {SUCC})
  %remaining = call ptr @slot(ptr %state, i64 {REMAINING})
  %records = call ptr @slot(ptr %state, i64 {RECORDS})
  %recp = call ptr @meta(ptr %state, i64 %w, i64 {RECORDED})
  %hasdeadline = icmp ne i64 %deadline, 0
  %task = alloca i64
  %k = alloca i64
  %turn = alloca i64
  store i64 0, ptr %turn
  %dl = alloca i64
  store i64 %deadline, ptr %dl
  br label %loop

loop:
  %stop = load atomic i64, ptr %stopp monotonic, align 8
  %stopped = icmp ne i64 %stop, 0
  br i1 %stopped, label %over, label %own
own:
  %mine = call i64 @pop(ptr %state, i64 %w)
  store i64 %mine, ptr %task
  %got = icmp sge i64 %mine, 0
  br i1 %got, label %run, label %steal0
steal0:
  store i64 1, ptr %k
  br label %steal
steal:
  %kk = load i64, ptr %k
  %more = icmp slt i64 %kk, %workers
  br i1 %more, label %try, label %idle
try:
  %wk = add i64 %w, %kk
  %v = urem i64 %wk, %workers
  %stolen = call i64 @steal(ptr %state, i64 %v)
  store i64 %stolen, ptr %task
  %kk1 = add i64 %kk, 1
  store i64 %kk1, ptr %k
  %gots = icmp sge i64 %stolen, 0
  br i1 %gots, label %run, label %steal

idle:
  %c = load atomic i64, ptr %completed acquire, align 8
  %alldone = icmp eq i64 %c, %n
  br i1 %alldone, label %over, label %wait
wait:
  %tw = call i64 @now()
  call void @idle(ptr %state, i64 %w, i64 %tw)
  %dlw = load i64, ptr %dl
  %late = icmp sgt i64 %tw, %dlw
  %leave = and i1 %hasdeadline, %late
  br i1 %leave, label %waited, label %loop
waited:
  %backw = call i64 @due(ptr %state, ptr %dl, i64 %tw)
  %gow = icmp ne i64 %backw, 0
  br i1 %gow, label %slice, label %loop

run:
  %i = load i64, ptr %task
  %t0 = call i64 @now()
  call void @end_idle(ptr %state, i64 %w, i64 %t0)
  %fnp = getelementptr i64, ptr %thunks, i64 %i
  %fn = load ptr, ptr %fnp
  %offp = getelementptr i64, ptr %offsets, i64 %i
  %off = load i64, ptr %offp
  %args = getelementptr i64, ptr %arguments, i64 %off
  call void %fn(ptr %pointers, ptr %args)
  %t1 = call i64 @now()
  %r = load i64, ptr %recp
  %row = mul i64 %w, %n
  %rk = add i64 %row, %r
  %at = mul i64 %rk, 3
  %q0 = getelementptr i64, ptr %records, i64 %at
  store i64 %i, ptr %q0
  %q1 = getelementptr i64, ptr %q0, i64 1
  store i64 %t0, ptr %q1
  %q2 = getelementptr i64, ptr %q0, i64 2
  store i64 %t1, ptr %q2
  %r1 = add i64 %r, 1
  store i64 %r1, ptr %recp
  %lop = getelementptr i64, ptr %sstart, i64 %i
  %lo = load i64, ptr %lop
  %i1 = add i64 %i, 1
  %hip = getelementptr i64, ptr %sstart, i64 %i1
  %hi = load i64, ptr %hip
  store i64 %lo, ptr %k
  br label %succs
succs:
  %j = load i64, ptr %k
  %left = icmp slt i64 %j, %hi
  br i1 %left, label %succ1, label %retired
succ1:
  %sp = getelementptr i64, ptr %succ, i64 %j
  %s = load i64, ptr %sp
  call void @count_down(ptr %state, ptr %remaining, i64 %w, i64 %s)
  %j1 = add i64 %j, 1
  store i64 %j1, ptr %k
  br label %succs
retired:
  ; the r-th retirement admits instance window + r: its count held one more, for its admission
  %before = atomicrmw add ptr %completed, i64 1 acq_rel
  %winp = getelementptr i64, ptr %state, i64 {WINDOW}
  %window = load i64, ptr %winp
  %a = add i64 %window, %before
  %admit = icmp slt i64 %a, %n
  br i1 %admit, label %admitting, label %next
admitting:
  call void @count_down(ptr %state, ptr %remaining, i64 %w, i64 %a)
  br label %next
next:
  %dln = load i64, ptr %dl
  %past = icmp sgt i64 %t1, %dln
  %yieldnow = and i1 %hasdeadline, %past
  br i1 %yieldnow, label %ran, label %loop
ran:
  %backr = call i64 @due(ptr %state, ptr %dl, i64 %t1)
  %gor = icmp ne i64 %backr, 0
  br i1 %gor, label %slice, label %loop

slice:
  ret i64 1
over:
  %te = call i64 @now()
  call void @end_idle(ptr %state, i64 %w, i64 %te)
  ret i64 0
}}

; worker 0 on the caller's thread, pinned for the call to the first CPU it may use and given its
; affinity back after (as service.pinned does, without Python's set of CPUs and its two cold system
; calls per run); a mask that does not fit CPU_WORDS words, or one CPU, leaves the thread as it is
define i64 @ptowsp_native_lead(ptr %state, i64 %deadline) {{
entry:
  %saved = alloca [{CPU_WORDS} x i64], align 8
  %one = alloca [{CPU_WORDS} x i64], align 8
  call void @llvm.memset.p0.i64(ptr %one, i8 0, i64 {8 * CPU_WORDS}, i1 false)
  %got = call i32 @sched_getaffinity(i32 0, i64 {8 * CPU_WORDS}, ptr %saved)
  %ok = icmp eq i32 %got, 0
  br i1 %ok, label %word, label %free
word:
  %k = phi i64 [0, %entry], [%k1, %word]
  %bits = phi i64 [0, %entry], [%bits1, %word]
  %first = phi i64 [-1, %entry], [%first1, %word]
  %p = getelementptr i64, ptr %saved, i64 %k
  %v = load i64, ptr %p
  %c = call i64 @llvm.ctpop.i64(i64 %v)
  %bits1 = add i64 %bits, %c
  %none = icmp eq i64 %first, -1
  %nz = icmp ne i64 %v, 0
  %take = and i1 %none, %nz
  %first1 = select i1 %take, i64 %k, i64 %first
  %k1 = add i64 %k, 1
  %end = icmp eq i64 %k1, {CPU_WORDS}
  br i1 %end, label %decide, label %word
decide:
  %many = icmp sgt i64 %bits1, 1
  br i1 %many, label %pin, label %free
pin:
  %fp = getelementptr i64, ptr %saved, i64 %first1
  %f = load i64, ptr %fp
  %low = call i64 @llvm.cttz.i64(i64 %f, i1 true)
  %bit = shl i64 1, %low
  %op = getelementptr i64, ptr %one, i64 %first1
  store i64 %bit, ptr %op
  call i32 @sched_setaffinity(i32 0, i64 {8 * CPU_WORDS}, ptr %one)
  %r = call i64 @ptowsp_native_worker(ptr %state, i64 0, i64 %deadline)
  call i32 @sched_setaffinity(i32 0, i64 {8 * CPU_WORDS}, ptr %saved)
  ret i64 %r
free:
  %r2 = call i64 @ptowsp_native_worker(ptr %state, i64 0, i64 %deadline)
  ret i64 %r2
}}

declare i32 @sched_getaffinity(i32, i64, ptr)
declare i32 @sched_setaffinity(i32, i64, ptr)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i64 @llvm.ctpop.i64(i64)
declare i64 @llvm.cttz.i64(i64, i1)
"""


def compile_ir(ir_for):
    """An MCJIT engine holding the code of `ir_for(triple)`, compiled for this host (llvmlite is
    imported on first use: `import ptowsp` compiles nothing); keep the engine while the code runs."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    module = llvm.parse_assembly(ir_for(triple))
    module.triple = triple
    module.verify()
    target = llvm.Target.from_triple(triple).create_target_machine(opt=2, jit=True)
    engine = llvm.create_mcjit_compiler(module, target)
    engine.finalize_object()
    return engine
