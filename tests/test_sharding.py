"""The suite's own sharding (tests/sharding.py): shares that cover every test once, balanced by time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.sharding import _parse, share


def test_shares_cover_every_test_exactly_once():
    ids = [f"t{i}" for i in range(11)]
    seconds = {f"t{i}": float(i) for i in range(11)}
    shares = [share(ids, k, 3, seconds) for k in range(3)]
    assert sorted(i for s in shares for i in s) == sorted(ids)


def test_shares_are_balanced_by_recorded_seconds():
    seconds = {"long": 10.0, "a": 4.0, "b": 3.0, "c": 3.0}
    assert share(list(seconds), 0, 2, seconds) == {"long"}
    assert share(list(seconds), 1, 2, seconds) == {"a", "b", "c"}


def test_a_test_without_a_record_counts_as_the_median():
    seconds = {"a": 1.0, "b": 2.0, "c": 9.0}
    shares = [share(["a", "b", "c", "new"], k, 2, seconds) for k in range(2)]
    assert shares[0] == {"c"} and shares[1] == {"a", "b", "new"}  # 9 against 1 + 2 + 2


@pytest.mark.parametrize("bad", ["2/2", "1", "a/b", "-1/2"])
def test_a_bad_shard_is_a_usage_error(bad):
    with pytest.raises(pytest.UsageError, match="K/N"):
        _parse(bad)


def test_the_launcher_closes_on_one_line_adding_up_every_shard(tmp_path):
    """CI reads the last line of `make test` the way it reads pytest's own closing line."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_a(): pass\n"
        "def test_b(): pass\n"
        "def test_c(): assert False\n"
        "@pytest.mark.skip(reason='shown as skipped')\n"
        "def test_d(): pass\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "tests.parallel", "-n", "2", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stdout
    assert done.stdout.splitlines()[-1] == "suite: 2 passed, 1 failed, 1 skipped"
