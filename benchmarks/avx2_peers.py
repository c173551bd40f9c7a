"""Run a benchmark with its peers on their AVX2 kernels, as on a machine without AVX-512.

    .bench-venv/bin/python benchmarks/avx2_peers.py benchmarks/exported_speed.py --levels x86-64-v3

onnxruntime's MLAS and torch choose their kernels from what the CPU says it has, so on an AVX-512
machine a ptowsp build for x86-64-v3 would be timed against AVX-512 peers.  This script runs the
given benchmark (with this Python) so that every side is an AVX2 program:

- onnxruntime: reads CPUID with the `cpuid` instruction, which a user process cannot trap here (no
  CPUID faulting on this VM).  The benchmark therefore runs under gdb, which stops at every `cpuid`
  of onnxruntime's libraries (found with objdump when each loads) and clears, in the answer to leaf
  7, the AVX-512 bits, AVX-VNNI and AVX-IFMA: MLAS then installs its AVX2/FMA3 kernels, as on an
  EPYC Milan.  The rest of the process runs untraced at full speed (gdb sees only thread starts and
  signals);
- torch: `ATEN_CPU_CAPABILITY=avx2` and `ONEDNN_MAX_CPU_ISA=AVX2`, its own switches;
- ptowsp: whatever the benchmark builds for (`--levels x86-64-v3`, or `PTOWSP_CPU=x86-64-v3`).

Needs gdb (with Python) and objdump on PATH.  The benchmark sees PTOWSP_PEERS_ISA=avx2 and can
print it beside its table.  The same file is the gdb script: gdb runs it with `gdb` importable.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

# CPUID leaf 7 bits an AVX2-only x86-64 (Zen 3, Haswell) does not report
_CLEARED = {
    (7, 0): {"rbx": (16, 17, 21, 26, 27, 28, 30, 31),  # AVX-512 F, DQ, IFMA, PF, ER, CD, BW, VL
             "rcx": (1, 6, 11, 12, 14),  # AVX-512 VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ
             "rdx": (2, 3, 8, 22, 23, 24, 25)},  # AVX-512 4VNNIW, 4FMAPS, VP2INTERSECT, AMX, FP16
    (7, 1): {"rax": (4, 5, 23),  # AVX-VNNI, AVX-512 BF16, AVX-IFMA
             "rdx": (4,)},  # AVX-VNNI-INT8
}


def _cpuid_sites(library: str) -> list[int]:
    """Addresses (relative to the library's base) of its `cpuid` instructions."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library],
                             capture_output=True, text=True, check=True).stdout
    return [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):\s+cpuid\s*$", listing, re.M)]


def _in_gdb() -> None:
    """Inside gdb: mask onnxruntime's CPUID answers, run the benchmark, exit with its status."""
    import gdb  # noqa: PLC0415 - only importable inside gdb

    asked: dict[object, tuple[int, int]] = {}  # thread -> (leaf, subleaf) of the cpuid it is executing

    def register(name: str) -> int:
        return int(gdb.parse_and_eval("$" + name)) & 0xFFFFFFFF

    class Before(gdb.Breakpoint):
        def stop(self) -> bool:
            asked[gdb.selected_thread().ptid] = (register("rax"), register("rcx"))
            return False

    class After(gdb.Breakpoint):
        def stop(self) -> bool:
            for reg, bits in _CLEARED.get(asked.pop(gdb.selected_thread().ptid, None), {}).items():
                gdb.execute(f"set ${reg} = {register(reg) & ~sum(1 << b for b in bits)}")
            return False

    masked: dict[str, int] = {}

    def on_load(event) -> None:
        path = os.path.realpath(event.new_objfile.filename)
        if "onnxruntime" not in os.path.basename(path) or path in masked or ".so" not in path:
            return
        mappings = gdb.execute("info proc mappings", to_string=True).splitlines()
        base = next(int(f[0], 16) for f in map(str.split, mappings)
                    if len(f) >= 6 and f[-1] == path and int(f[3], 16) == 0)
        sites = _cpuid_sites(path)
        for site in sites:
            Before(f"*{base + site:#x}", internal=True)
            After(f"*{base + site + 2:#x}", internal=True)  # cpuid is two bytes: 0f a2
        masked[path] = len(sites)

    status = []
    gdb.events.new_objfile.connect(on_load)
    gdb.events.exited.connect(lambda event: status.append(getattr(event, "exit_code", 1)))
    for setting in ("pagination off", "startup-with-shell off", "print thread-events off",
                    "print inferior-events off", "environment PTOWSP_PEERS_ISA=avx2",
                    "environment ATEN_CPU_CAPABILITY=avx2", "environment ONEDNN_MAX_CPU_ISA=AVX2"):
        gdb.execute("set " + setting)
    gdb.execute("handle all nostop noprint pass")
    gdb.execute("run")
    if not any(masked.values()):
        gdb.write("avx2_peers: onnxruntime was never loaded, or had no cpuid to mask\n", gdb.STDERR)
        status = [status[0] if status and status[0] else 3]
    else:
        gdb.write("avx2_peers: masked " + ", ".join(f"{n} cpuid in {os.path.basename(p)}"
                                                     for p, n in masked.items() if n) + "\n")
    gdb.execute(f"quit {status[0] if status else 1}")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    missing = [tool for tool in ("gdb", "objdump") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"avx2_peers: needs {' and '.join(missing)} on PATH (Debian: gdb, binutils)")
    os.execvp("gdb", ["gdb", "-q", "-nx", "-batch", "-iex", "set auto-load off", "-x", __file__,
                      "--args", sys.executable, *sys.argv[1:]])


if __name__ == "__main__":
    _in_gdb() if importlib.util.find_spec("gdb") else main()
