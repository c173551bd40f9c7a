"""A built program run from several threads at once, from its very first runs: correct, never a crash.

The first runs create the process's shared resources (the pool's native crew, the compiled native
loop); two threads creating one at the same time once made two and dropped one, whose LLVM engine
freed code the other thread was running (SIGSEGV).  Each trial is a fresh process, so the first
runs really are the first."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ptowsp as pw

SCRIPT = """
import threading
import numpy as np
import ptowsp as pw

wl = pw.zoo.matmul(32, 32, 32)
s = wl.schedule().tile("C", i=8, j=16).parallel("C", "i.outer", "j.outer")  # 8 tiles, 2 workers
prog = pw.build(s, "cpu", workers=2)
rng = np.random.default_rng(0)
a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
want = a.astype(np.float64) @ b
start, wrong = threading.Barrier(THREADS), []

def runs():
    start.wait()
    for _ in range(RUNS):
        got = prog.run(A=a, B=b)["C"]
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            wrong.append(float(np.max(np.abs(got - want))))

threads = [threading.Thread(target=runs) for _ in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not wrong, wrong
print("ok")
"""


@pytest.mark.skipif("cpu" not in pw.targets(), reason="needs the cpu target")
@pytest.mark.parametrize("trial", range(3))
def test_threads_running_a_fresh_program_at_once_never_crash(trial):
    code = SCRIPT.replace("THREADS", "4").replace("RUNS", "20")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])
