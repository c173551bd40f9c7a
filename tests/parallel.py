"""`make test`: the suite as N pytest processes at once, each a balanced shard (tests/sharding.py).

The suite is mostly single-threaded (LLVM compiles, the device model, small
numpy arrays), so one pytest process leaves the second of this project's
two cores idle.  Each shard's output is printed as it finishes; the exit
status is that of the first shard that failed, and the last line adds the
shards' outcomes up the way pytest's own closing line would
("suite: 669 passed, 0 failed, 1 skipped").

    python -m tests.parallel [-n N] [--record] [pytest arguments...]

--record rewrites tests/durations.json (what the shards are balanced by)
from this run's times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.sharding import DURATIONS, load_durations

NO_TESTS = 5  # pytest's exit status when a shard got nothing to run (a narrow selection)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--shards", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--record", action="store_true", help=f"rewrite {DURATIONS.name} from this run's times")
    args, pytest_args = parser.parse_known_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        running = {}
        for k in range(args.shards):
            cmd = [sys.executable, "-m", "pytest", "-p", "tests.sharding", f"--shard={k}/{args.shards}",
                   "--count-outcomes", str(Path(tmp) / f"outcomes-{k}.json"), *pytest_args]
            if args.record:
                cmd += ["--record-durations", str(Path(tmp) / f"durations-{k}.json")]
            log = open(Path(tmp) / f"shard-{k}.log", "w+")  # noqa: SIM115 - closed once the shard is done
            running[k] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log)
        statuses = {}
        try:
            while running:
                for k, (proc, log) in list(running.items()):
                    if proc.poll() is not None:
                        log.seek(0)
                        print(f"===== shard {k}/{args.shards} (exit {proc.returncode}) =====\n{log.read()}", flush=True)
                        log.close()
                        statuses[k] = proc.returncode
                        del running[k]
                time.sleep(0.2)
        finally:
            for proc, _ in running.values():  # interrupted: no shard outlives the run
                proc.kill()
                proc.wait()
        if args.record:
            measured = [json.loads(p.read_text()) for p in Path(tmp).glob("durations-*.json")]
            merged = {**load_durations(), **{k: v for shard in measured for k, v in shard.items()}}
            DURATIONS.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
        total = dict.fromkeys(("passed", "failed", "skipped"), 0)
        for k, status in sorted(statuses.items()):
            counted = Path(tmp) / f"outcomes-{k}.json"
            if not counted.exists():
                print(f"shard {k} counted no outcomes (exit {status}): see its output above", flush=True)
                continue
            for key, n in json.loads(counted.read_text()).items():
                total[key] += n
    print(f"{args.shards} shards in {time.perf_counter() - started:.0f} s", flush=True)
    print(f"suite: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped", flush=True)
    failed = [s for s in statuses.values() if s not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(s == NO_TESTS for s in statuses.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
