"""The cpu kernel cache never loads a damaged, foreign or hostile entry, and never runs its text.

Each case damages a real entry (object code `<key>.o`, manifest `<key>.json`) in a cache directory of
its own, builds again and checks: a KernelCacheWarning naming the file, the kernels recompiled, results
equal to `pw.reference`, no marker file created.  Cases that would hand damaged object code to LLVM run
in a subprocess, which must exit with 0 (a segfault would not).  `resigned` rewrites a manifest with a
valid checksum, so the checks behind the checksum (the pydantic model, the formulas' limits, the names)
are exercised too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.backends.cpu import describe
from ptowsp.backends.cpu.cache import KernelCacheWarning, cache_dir
from ptowsp.backends.cpu.isa import target_cpu
from ptowsp.backends.cpu.jit import cache_key
from ptowsp.lower.formula import MAX_DEPTH, Formula, check_limits, formula_of

ROOT = pathlib.Path(__file__).parents[2]
_SEAL = b',"manifest_sha256":"'


def workload() -> pw.Workload:
    wl = pw.Workload("cached")
    a, b = wl.input("A", (32, 32)), wl.input("B", (32, 32))
    k = pw.reduce_axis(32, "k")
    wl.output(wl.compute("C", (32, 32), lambda i, j: pw.sum(a[i, k] * b[k, j], axis=k)))
    return wl


def schedule(tile: int = 8) -> pw.Schedule:
    """16 instances (4 x 4 tiles): the task table evaluates the boxes with numpy."""
    return workload().schedule().tile("C", i=tile, j=tile).parallel("C", "i.outer", "j.outer")


INPUTS = {"A": np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32),
          "B": np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)}


def entry(tile: int = 8) -> tuple[pathlib.Path, pathlib.Path]:
    """(object, manifest) of the schedule's entry in the current cache directory."""
    key = cache_key(describe(schedule(tile)), target_cpu())
    return cache_dir() / f"{key}.o", cache_dir() / f"{key}.json"


@contextlib.contextmanager
def cache_at(root: pathlib.Path):
    previous = os.environ.get("PTOWSP_CACHE_DIR")
    os.environ["PTOWSP_CACHE_DIR"] = str(root)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PTOWSP_CACHE_DIR", None)
        else:
            os.environ["PTOWSP_CACHE_DIR"] = previous


def build_and_check(damaged: bool) -> list[str]:
    """Build and run from the current cache; check results, whether the entry was rebuilt, and that a
    rebuilt entry is served from the cache afterwards.  Returns the cache warnings' messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = pw.build(schedule(), target="cpu")
        out = prog.run(**INPUTS)
    messages = [str(w.message) for w in caught if issubclass(w.category, KernelCacheWarning)]
    np.testing.assert_allclose(out["C"], pw.reference(workload(), **INPUTS)["C"], rtol=1e-5, atol=1e-5)
    assert bool(messages) == damaged, messages
    assert prog._executable.from_cache != damaged
    if damaged:
        with warnings.catch_warnings():
            warnings.simplefilter("error", KernelCacheWarning)
            assert pw.build(schedule(), target="cpu")._executable.from_cache  # the entry was repaired
    return messages


OBJECT_DAMAGE = {  # (our object code, another build's) -> damaged object code
    "zero-byte": lambda data, other: b"",
    "truncated": lambda data, other: data[:len(data) // 2],
    "random-bytes": lambda data, other: np.random.default_rng(2).bytes(len(data)),
    "zeroed-after-header": lambda data, other: data[:64] + b"\0" * (len(data) - 64),
    "another-build": lambda data, other: other,
}


def pristine_entries(root: pathlib.Path) -> pathlib.Path:
    """Build the entries of schedule(8) and schedule(16) in the cache at `root`.  A subprocess makes
    its own: the key covers ptowsp's source, which may change while the tests run."""
    with cache_at(root):
        pw.build(schedule(8), target="cpu")
        pw.build(schedule(16), target="cpu")
    return root / "cpu"


def damaged_object_is_rebuilt(root: str, damage: str) -> None:
    """In a subprocess: damage the object code of a fresh entry; the next build must recompile it."""
    pristine_entries(pathlib.Path(root))
    with cache_at(pathlib.Path(root)):
        obj, other = entry()[0], entry(16)[0]
        obj.write_bytes(OBJECT_DAMAGE[damage](obj.read_bytes(), other.read_bytes()))
        messages = " ".join(build_and_check(damaged=True))
        assert obj.name in messages
        print(f"rebuilt {obj.name}: {messages}")


def mutated_objects(scratch: str, examples: str) -> None:
    """In a subprocess: hypothesis-generated damage to the object code, each example in a fresh cache."""
    pristine = pristine_entries(pathlib.Path(scratch) / "pristine")

    # (deadline=None as tests/conftest.py sets it: this subprocess does not load conftest, and a loaded
    # 2-core VM once took 292 ms on an example)
    @settings(max_examples=int(examples), derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(mutation=MUTATION)
    def check(mutation) -> None:
        root = pathlib.Path(scratch) / "cache"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(pristine, root / "cpu")
        with cache_at(root):
            obj, _ = entry()
            obj.write_bytes(mutate(obj.read_bytes(), mutation))
            assert "the object code does not match" in " ".join(build_and_check(damaged=True))
            checked.append(mutation)

    checked: list = []
    check()
    print(f"{len(checked)} mutations rebuilt")


MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**24), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 2**24)),
    st.tuples(st.just("insert"), st.integers(0, 2**24), st.binary(min_size=1, max_size=16)),
)


def mutate(data: bytes, mutation: tuple) -> bytes:
    """Flip one byte, cut the data short, or insert bytes: the result always differs from `data`."""
    kind, at, *rest = mutation
    if kind == "flip":
        at %= len(data)
        return data[:at] + bytes([data[at] ^ rest[0]]) + data[at + 1:]
    if kind == "truncate":
        return data[:at % len(data)]
    at %= len(data) + 1
    return data[:at] + rest[0] + data[at:]


def in_subprocess(call: str, *args: str) -> str:
    """Run `call` of this module in a fresh interpreter; it must exit with 0 (not crash).  Returns what
    it printed."""
    code = f"import sys; from tests.robustness.test_kernel_cache import {call}; {call}(*sys.argv[1:])"
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def read_manifest(path: pathlib.Path) -> dict:
    return json.loads(path.read_bytes().rpartition(_SEAL)[0] + b"}")


def resigned(path: pathlib.Path, change) -> None:
    """Rewrite the manifest at `path` with `change(data)` applied and a valid checksum."""
    data = read_manifest(path)
    changed = change(data)
    body = (changed if isinstance(changed, bytes) else json.dumps(data, separators=(",", ":")).encode())[:-1]
    path.write_bytes(body + _SEAL + hashlib.sha256(body).hexdigest().encode() + b'"}')


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> pathlib.Path:
    return pristine_entries(tmp_path_factory.mktemp("pristine"))


@pytest.fixture
def cache(pristine, tmp_path, monkeypatch) -> pathlib.Path:
    """This test's own copy of the pristine cache, as $PTOWSP_CACHE_DIR."""
    shutil.copytree(pristine, tmp_path / "cache" / "cpu")
    monkeypatch.setenv("PTOWSP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cpu"


@pytest.fixture
def marker(tmp_path) -> pathlib.Path:
    """A file that a Python escape in a manifest would create; every test checks it was not."""
    path = tmp_path / "escaped"
    yield path
    assert not path.exists(), "a manifest ran code"


def escape(marker: pathlib.Path) -> str:
    return f"__import__('os').system('touch {marker}') or (lambda: 0).__globals__ or 1"


# -- the entry is intact, or only half there ---------------------------------------------------------

def test_an_intact_entry_is_loaded_without_warning(cache):
    build_and_check(damaged=False)


@pytest.mark.parametrize("missing", [0, 1], ids=["object", "manifest"])
def test_half_an_entry_is_a_miss_not_damage(cache, missing):
    """A crash between the two writes leaves half an entry: recompiled silently."""
    entry()[missing].unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelCacheWarning)
        assert not pw.build(schedule(), target="cpu")._executable.from_cache


# -- damaged object code (would reach LLVM: in a subprocess) -----------------------------------------

@pytest.mark.parametrize("damage", list(OBJECT_DAMAGE))
def test_damaged_object_code_is_recompiled(tmp_path, damage):
    report = in_subprocess("damaged_object_is_rebuilt", str(tmp_path / "cache"), damage)
    assert report.startswith("rebuilt ") and ".o:" in report, report


def test_hypothesis_mutations_of_object_code(tmp_path):
    report = in_subprocess("mutated_objects", str(tmp_path / "scratch"), "12")
    assert "12 mutations rebuilt" in report, report


# -- damaged or foreign manifests ----------------------------------------------------------------------

@pytest.mark.parametrize("damage", [
    pytest.param(lambda text: b"", id="zero-byte"),
    pytest.param(lambda text: text[:len(text) // 2], id="truncated"),
    pytest.param(lambda text: text[:-1], id="last-byte-cut"),
    pytest.param(lambda text: np.random.default_rng(3).bytes(len(text)), id="garbage"),
    pytest.param(lambda text: text.replace(b'"order"', b'"\xff\xfe"', 1), id="non-utf8"),
    pytest.param(lambda text: text.replace(b'"op":"const","value":4', b'"op":"const","value":40', 1),
                 id="wrong-grid-value"),
    pytest.param(lambda text: text.replace(b'"key":"', b'"key": "', 1), id="whitespace"),
    pytest.param(lambda text: text.rpartition(_SEAL)[0] + b"}", id="no-checksum"),
    pytest.param(lambda text: text[:-6] + b'zzzz"}', id="checksum-not-hex"),
])
def test_damaged_manifest_is_recompiled(cache, damage):
    _, manifest = entry()
    text = manifest.read_bytes()
    assert b'"op":"const","value":4' in text  # the grid, 4 x 4
    manifest.write_bytes(damage(text))
    assert manifest.name in " ".join(build_and_check(damaged=True))


def test_manifest_of_another_key_is_recompiled(cache):
    shutil.copyfile(entry(16)[1], entry()[1])
    assert "another build" in " ".join(build_and_check(damaged=True))


def test_whole_entry_of_another_key_is_recompiled(cache):
    """Both files copied from another build: the manifest's key gives it away."""
    for theirs, ours in zip(entry(16), entry()):
        shutil.copyfile(theirs, ours)
    assert "another build" in " ".join(build_and_check(damaged=True))


def test_unreadable_manifest_does_not_stop_the_build(cache):
    """The manifest is a directory: it is not read, nor can it be replaced; the build still works."""
    _, manifest = entry()
    manifest.unlink()
    manifest.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = pw.build(schedule(), target="cpu").run(**INPUTS)
    np.testing.assert_allclose(out["C"], pw.reference(workload(), **INPUTS)["C"], rtol=1e-5, atol=1e-5)
    messages = " ".join(str(w.message) for w in caught if issubclass(w.category, KernelCacheWarning))
    assert "not a regular file" in messages and "cannot be stored" in messages, messages


# -- manifests with a valid checksum but hostile or invalid content ------------------------------------

def _grid(data: dict) -> list:
    return data["kernels"]["C"]["grid"]


def _start(data: dict) -> dict:
    """The start formula of C's first write dimension."""
    return data["kernels"]["C"]["access"]["writes"][0][1][0][0]


def _set_start(data: dict, formula: dict) -> None:
    data["kernels"]["C"]["access"]["writes"][0][1][0][0] = formula


def _nested(depth: int) -> dict:
    formula: dict = {"op": "const", "value": 4}
    for _ in range(depth):
        formula = {"op": "neg", "args": [{"op": "neg", "args": [formula]}]}
    return formula


RESIGNED = [
    ("unknown-op", lambda d, m: _grid(d).__setitem__(0, {"op": "call", "name": "system", "value": 4}), "grid.0.op"),
    ("escape-as-formula", lambda d, m: _grid(d).__setitem__(0, escape(m)), "valid"),
    ("escape-as-size-name", lambda d, m: _grid(d).__setitem__(0, {"op": "size", "name": escape(m)}), "identifier"),
    ("escape-as-value", lambda d, m: _grid(d)[0].__setitem__("value", escape(m)), "valid integer"),
    ("escape-in-flops", lambda d, m: d["kernels"]["C"]["access"].__setitem__("flops", escape(m)), "valid"),
    ("escape-as-symbol", lambda d, m: d["kernels"]["C"].__setitem__("symbol", escape(m)), "pattern"),
    ("nested-100000-deep", lambda d, m: (lambda c: b'{"key":"' + c.encode() + b'","kernels":{"C":{"grid":['
                                         + b'{"op":"neg","args":[' * 100000 + b'{"op":"const","value":4}'
                                         + b"]}" * 100000 + b"]}}}")(d["key"]), "recursion"),
    ("nested-beyond-limit", lambda d, m: _grid(d).__setitem__(0, _nested(MAX_DEPTH // 2 + 1)), "deeper"),
    ("wide-beyond-limit", lambda d, m: _grid(d).__setitem__(0, {"op": "add", "args": [{"op": "const"}] * 5000}),
     "arguments"),
    ("unknown-size", lambda d, m: _set_start(d, {"op": "size", "name": "n"}), "sizes \\['n'\\]"),
    ("declared-size-the-workload-lacks", lambda d, m: (d["kernels"]["C"]["access"].__setitem__("sizes", ["n"]),
                                                       _set_start(d, {"op": "size", "name": "n"})), "sizes \\['n'\\]"),
    ("grid-reads-a-coordinate", lambda d, m: _grid(d).__setitem__(0, {"op": "grid"}), "grid coordinate"),
    ("coordinate-beyond-grid", lambda d, m: _start(d)["args"][0].update(value=7), "beyond the grid"),
    ("huge-constant", lambda d, m: _grid(d)[0].update(value=10**30), "less than or equal"),
    ("extra-field", lambda d, m: d.__setitem__("run", "rm -rf /"), "Extra inputs"),
    ("extra-field-in-formula", lambda d, m: _grid(d)[0].update(source="1+1"), "Extra inputs"),
    ("missing-field", lambda d, m: d.pop("order"), "Field required"),
    ("wrong-object-checksum", lambda d, m: d.__setitem__("object_sha256", "0" * 64), "object code does not match"),
    ("unknown-symbol", lambda d, m: d["kernels"]["C"].__setitem__("symbol", "ptowsp_nope"), "no symbol"),
    ("unknown-tensor", lambda d, m: d["kernels"]["C"]["arguments"].__setitem__(0, "etc_passwd"), "etc_passwd"),
    ("unknown-task", lambda d, m: d["order"].append("evil"), "not tasks"),
    ("arity", lambda d, m: _grid(d).__setitem__(0, {"op": "sub", "args": [{"op": "const"}]}), "arguments"),
    ("not-an-object", lambda d, m: b"[1,2,3]", "Invalid JSON"),
    ("non-utf8", lambda d, m: json.dumps(d, separators=(",", ":")).encode().replace(b'"order"', b'"\xff"', 1),
     "Invalid JSON|UTF|utf"),
]


@pytest.mark.parametrize("change,reason", [pytest.param(c, r, id=i) for i, c, r in RESIGNED])
def test_resigned_hostile_manifest_is_recompiled(cache, marker, change, reason):
    _, manifest = entry()
    resigned(manifest, lambda data: change(data, marker))
    messages = build_and_check(damaged=True)
    assert manifest.name in " ".join(messages) or entry()[0].name in " ".join(messages)
    assert any(re.search(reason, m) for m in messages), messages


@pytest.mark.parametrize("part", ["object", "manifest"])
def test_a_fifo_in_place_of_an_entry_is_discarded_not_read(cache, part):
    """A FIFO blocked the next build for ever (reading it waits for a writer)."""
    path = entry()[0 if part == "object" else 1]
    path.unlink()
    os.mkfifo(path)
    messages = build_and_check(damaged=True)
    assert any(path.name in m and "not a regular file" in m for m in messages), messages


def widened_grid_runs_safely(root: str) -> None:
    """In a subprocess: a re-sealed manifest whose grid says 1000 rows of tiles where the kernel was
    compiled for 4 passes every check the cache can make; the kernel leaves the extra tiles alone."""
    pristine_entries(pathlib.Path(root))
    with cache_at(pathlib.Path(root)):
        resigned(entry()[1], lambda data: _grid(data)[0].update(value=1000))
        prog = pw.build(schedule(), target="cpu")
        assert prog._executable.from_cache
        assert len(prog._executable.table.instances) == 1000 * 4
        out = prog.run(**INPUTS)
        np.testing.assert_allclose(out["C"], pw.reference(workload(), **INPUTS)["C"], rtol=1e-5, atol=1e-5)
        print("ran")


def test_a_grid_wider_than_the_kernel_was_compiled_for_does_not_crash(tmp_path):
    assert "ran" in in_subprocess("widened_grid_runs_safely", str(tmp_path))


# -- hypothesis: random damage to a real manifest -------------------------------------------------------

@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=MUTATION)
def test_hypothesis_mutations_of_manifest(pristine, cache, marker, mutation):
    for ours in entry():  # each example starts from the pristine entry
        shutil.copyfile(pristine / ours.name, ours)
    _, manifest = entry()
    manifest.write_bytes(mutate(manifest.read_bytes(), mutation))
    assert manifest.name in " ".join(build_and_check(damaged=True))


# -- formulas ---------------------------------------------------------------------------------------------

def test_formula_limits_are_checked_without_recursion():
    f = Formula(op="const", value=1)
    for _ in range(100000):  # built in Python, one node at a time: no limit applies yet
        f = Formula(op="neg", args=(f,))
    with pytest.raises(ValueError, match="deeper"):
        check_limits(f)
    assert formula_of(pw.Workload("w").input("x", ("n",)).shape[0]) == Formula(op="size", name="n")


def test_symbolic_sizes_survive_the_cache(tmp_path, monkeypatch):
    """A workload with a size: the cached access is bound per binding of the sizes."""
    monkeypatch.setenv("PTOWSP_CACHE_DIR", str(tmp_path))
    wl = pw.Workload("rows")
    x = wl.input("x", ("n", 48))
    wl.output(wl.compute("y", ("n", 48), lambda i, j: x[i, j] * 2.0 + 1.0))
    s = wl.schedule().split("y", "i", 16).parallel("y", "i.outer")
    for attempt in range(2):
        prog = pw.build(s, target="cpu")
        assert prog._executable.from_cache == bool(attempt)
        for n in (5, 16, 37):
            a = np.random.default_rng(n).standard_normal((n, 48)).astype(np.float32)
            np.testing.assert_allclose(prog.run(x=a)["y"], pw.reference(wl, x=a)["y"], rtol=1e-6)


def test_a_store_that_fails_part_way_leaves_no_file_behind(tmp_path):
    """A full disk (here: a file size limit of 1 KB, under which the object code does not fit) makes the
    store fail with a warning and the build go on; no half-written temporary file stays in the cache."""
    code = f"""
import resource, signal, warnings
import numpy as np
import ptowsp as pw
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    prog = pw.build(pw.zoo.matmul(16, 16, 16), "cpu", workers=1)
assert any("cannot be stored" in str(w.message) for w in caught), [str(w.message) for w in caught]
a = np.ones((16, 16), np.float32)
assert prog.run(A=a, B=a)["C"][0, 0] == 16
"""
    env = {**os.environ, "PTOWSP_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []
