"""The ONNX standard's own backend test suite, run through `pw.frontend.from_onnx`.

The cases are the ones the onnx package ships (onnx.backend.test): the node cases that
`collect_testcases()` generates (one model and its expected outputs per operator and
attribute form) and the on-disk suites `pytorch-converted`, `pytorch-operator`, `simple` and
`light` (nine model-zoo architectures, whose expected outputs were computed for the input
onnx's own runner makes: `Runner.generate_dummy_data(..., seed=0, random=False)`).

`outcome(case, target)` runs one case and classifies what happened, the way onnx's runner
judges a backend: every output with the expected dtype and shape, equal for integers and
within the case's rtol/atol for floats.  test_onnx_backend.py holds the expectation file to
that; `python -m tests.onnx_backend` prints the counts and can rewrite the file.
"""

from __future__ import annotations

import functools
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import ptowsp as pw
from ptowsp.errors import PtowspError

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
DISK_SUITES = ("pytorch-converted", "pytorch-operator", "simple", "light")


@dataclass(frozen=True)
class Case:
    """One model of the suite and the data sets it is judged on."""

    name: str
    suite: str  # "node" or one of DISK_SUITES
    load: object  # () -> (ModelProto, [(inputs, expected outputs)])
    rtol: float
    atol: float

    def model_and_data(self):
        return self.load()


@functools.cache
def cases() -> dict[str, Case]:
    """Every case by name (names are unique across the suites: onnx prefixes them `test_`)."""
    from onnx.backend.test.case.node import collect_testcases

    found = {}
    for c in collect_testcases():
        found[c.name] = Case(c.name, "node", functools.partial(_generated, c), c.rtol, c.atol)
    for suite in DISK_SUITES:
        for path in sorted((DATA / suite).iterdir()):
            if suite == "light":
                if path.suffix == ".onnx":
                    name = "test_" + path.stem.removeprefix("light_")
                    found[name] = Case(name, suite, functools.partial(_light, path), 1e-3, 1e-7)
            elif (path / "model.onnx").exists():
                found[path.name] = Case(path.name, suite, functools.partial(_on_disk, path), 1e-3, 1e-7)
    return found


def _generated(c):
    return c.model, [([_array(x) for x in inputs], [_array(y) for y in outputs]) for inputs, outputs in c.data_sets]


def _array(x) -> np.ndarray:
    """A data set's value: the generators keep dtypes numpy lacks (bfloat16, float8) as TensorProtos."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    return x if isinstance(x, list) or x is None else np.asarray(x)  # (a sequence or optional value)


def _on_disk(folder: Path):
    model = onnx.load(folder / "model.onnx")
    data = []
    for d in sorted(folder.glob("test_data_set_*")):
        inputs = [_tensor(p) for p in sorted(d.glob("input_*.pb"), key=_index)]
        outputs = [_tensor(p) for p in sorted(d.glob("output_*.pb"), key=_index)]
        data.append((inputs, outputs))
    return model, data


def _light(path: Path):
    from onnx.backend.test.runner import Runner

    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    name = path.stem.removeprefix("light_")
    inputs = [Runner.generate_dummy_data(x, seed=0, name=name, random=False)
              for x in model.graph.input if x.name not in inits]
    outputs = [_tensor(path.with_name(f"{path.stem}_output_{k}.pb")) for k in range(len(model.graph.output))]
    return model, [(inputs, outputs)]


def _index(p: Path) -> int:
    return int(p.stem.rsplit("_", 1)[1])


def _tensor(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


@dataclass(frozen=True)
class Outcome:
    """What one case did on one target: "pass", "refused" (a typed ptowsp error, the message
    saying what is unsupported), "wrong" (ran, and an output differs: a silent wrong result),
    "rounding" (a float16/bfloat16 output off by at most 2 units of its last place: rounding, not
    a wrong result) or "crashed" (any other exception: a bug)."""

    kind: str
    detail: str = ""


def outcome(case: Case, target: str) -> Outcome:
    try:
        model, data = case.model_and_data()
    except Exception as e:  # onnx itself cannot make this case (an old generator, a missing file)
        return Outcome("unavailable", f"{type(e).__name__}: {e}")
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    try:
        built: dict[tuple, tuple] = {}  # the inputs given as values, with theirs -> (workload, run)
        for inputs, expected in data:
            given = dict(zip(names, inputs, strict=False))
            wl, run, bound = _imported(model, given, target, built)
            feeds = dict(zip(wl.inputs, [given[n] for n in names if n not in bound], strict=False))
            got = run(feeds)
            problem = compare([got[n] for n in wl.outputs], expected, case.rtol, case.atol)
            if problem:
                return Outcome("rounding" if problem.startswith(ROUNDING) else "wrong", problem)
    except PtowspError as e:
        return Outcome("refused", f"{type(e).__name__}: {e}")
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{os.path.basename(tb.filename)}:{tb.lineno}"
        return Outcome("crashed", f"{type(e).__name__} at {where}: {e}")
    return Outcome("pass")


def _imported(model, given: dict[str, np.ndarray], target: str, built: dict):
    """The model imported and built, as a backend that specializes on the inputs steering shapes
    would: each input the import says it needs (ValueNeeded) is given as a value (`values=`)."""
    bound: dict[str, np.ndarray] = {}
    for _ in range(len(given) + 1):
        key = tuple((n, v.tobytes(), v.shape) for n, v in bound.items())
        if key in built:
            return (*built[key], bound)
        try:
            wl = pw.frontend.from_onnx(model, values=bound)
        except pw.frontend.ValueNeeded as e:
            if e.input in bound or e.input not in given:
                raise
            bound[e.input] = given[e.input]
            continue
        built[key] = (wl, _runner(wl, target))
        return (*built[key], bound)
    raise AssertionError("unreachable: each retry binds one more input")


def _runner(wl: pw.Workload, target: str):
    if target == "reference":
        return lambda feeds: pw.reference(wl, **feeds)
    prog = pw.build(wl, target)
    return lambda feeds: prog.run(**feeds)


def compare(got: list[np.ndarray], expected: list[np.ndarray], rtol: float, atol: float) -> str:
    """"" when every output matches as onnx's runner judges it; else what differs first."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        g = np.asarray(g)
        if g.dtype != e.dtype:
            return f"output {k}: dtype {g.dtype}, expected {e.dtype}"
        if g.shape != e.shape:
            return f"output {k}: shape {g.shape}, expected {e.shape}"
        if e.dtype.kind in "fc" or e.dtype.name.startswith(("float", "bfloat")):  # ml_dtypes' floats too
            bad = ~np.isclose(g.astype(np.complex128 if e.dtype.kind == "c" else np.float64),
                              e.astype(np.complex128 if e.dtype.kind == "c" else np.float64),
                              rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = g != e
        if np.any(bad):
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            what = f"output {k}: {int(np.sum(bad))} of {e.size} elements differ, e.g. at {at}: {g[at]} vs {e[at]}"
            return f"{ROUNDING} {what}" if _within_ulps(g, e, 2) else what
    return ""


ROUNDING = "within 2 units of the last place of a narrow float:"


def _within_ulps(got: np.ndarray, want: np.ndarray, ulps: int) -> bool:
    """Whether a float16/bfloat16 result is within `ulps` of the expected one everywhere: the
    rounding of a chain of narrow-float nodes, against an expected output computed in one piece."""
    if want.dtype.name not in ("float16", "bfloat16"):
        return False
    g, w = got.astype(np.float64), want.astype(np.float64)
    spacing = np.abs(np.spacing(want.astype(np.float32)).astype(np.float64))
    spacing *= 2.0 ** (23 - (10 if want.dtype.name == "float16" else 7))  # float32's spacing to the narrow one's
    return bool(np.all((np.abs(g - w) <= ulps * spacing) | (np.isnan(g) & np.isnan(w))))


PEER_PASSES = Path(__file__).with_name("onnxruntime_passes.txt")  # benchmarks/onnx_suite_peer.py --write


def peer_passes() -> set[str]:
    """The cases onnxruntime passes (empty when the list was not made)."""
    if not PEER_PASSES.exists():
        return set()
    return {line for line in PEER_PASSES.read_text().split("\n") if line and not line.startswith("#")}


def operators(name: str) -> set[str]:
    """The operators a node case's model uses (an expanded case: those of the function body)."""
    model, _ = cases()[name].model_and_data()
    return {n.op_type for n in model.graph.node}


# -- the expectation file -------------------------------------------------------------------------
EXPECTED = Path(__file__).with_name("expected.toml")
TARGETS = ("reference", "cpu", "aicore")
# Which cases run where (by a hash of the name: every EVERY[target]-th, the samples nested): `make
# test` runs a third of the cases on the reference, a 12th on cpu and a 48th on aicore
# (whose host code is cpu's), and not the light model-zoo suite (90 s of the reference's numpy
# convolutions), to stay within the suite's 10 minutes; `make conformance-onnx`
# (PTOWSP_ONNX_SUITE=full) runs every case on the reference and cpu, an eighth on aicore.
FULL = os.environ.get("PTOWSP_ONNX_SUITE") == "full"
EVERY = {"reference": 1, "cpu": 1, "aicore": 8} if FULL else {"reference": 3, "cpu": 12, "aicore": 48}

_OUT_OF_SCOPE = (  # (what the refusal says, why ptowsp does not take it) in the order they are tried
    (r"domain 'ai\.onnx\.preview\.training'", "out of scope: training operators (ai.onnx.preview.training)"),
    (r"domain 'ai\.onnx\.ml'|op (LabelEncoder|TreeEnsemble\w*|ArrayFeatureExtractor|Binarizer)\b",
     "out of scope: the classical-ML domain ai.onnx.ml"),
    (r"sequence_type|optional_type|op (Sequence\w+|SplitToSequence|ConcatFromSequence|Optional\w*)\b",
     "out of scope: sequence and optional values (ptowsp computes tensors)"),
    (r"dtype 'object'|op (StringNormalizer|StringConcat|StringSplit|RegexFullMatch)\b",
     "out of scope: string tensors"),
    (r"op (RandomNormal|RandomUniform|RandomNormalLike|RandomUniformLike|Bernoulli|Multinomial)\b",
     "out of scope: random generators (their numbers depend on the implementation's generator)"),
    (r"op ImageDecoder\b", "out of scope: decoding image files"),
)
_NODE = r"op (\w+)\)?:"  # how describe() ends: "ONNX node of op X:" or "ONNX node 'n' (op X):"
_GAPS = (  # (what the refusal says, the gap it is) - issue 53 unless said otherwise
    (_NODE + r" operator '\w+' is not supported", "operator {0} is not imported"),
    (_NODE + r" operator domain '([\w.]+)' is not supported", "operator {0} of the domain {1}"),
    (_NODE + r" input \d+ \((\w+), '[^']*'\) must be a constant", "{0}'s {1} computed at run time (the import "
     "needs it as a value)"),
    (r"unsupported dtype '(\w+)'", "dtype {0}"),
    (_NODE + r" attribute (\w+)=", "{0} attribute {1}"),
    (_NODE + r" only (\d)-D", "{0} in other than {1}-D"),
)


def reason(o: Outcome) -> str:
    """Why a case that does not pass fails, as the expectation file says it (issue 53's gaps)."""
    import re

    if o.kind == "rounding":
        return ("narrow-float rounding: the expected output rounds to float16/bfloat16 at other points than "
                "ptowsp's import, which computes in float32 between the graph's edges (at most 2 units of the "
                "last place apart)")
    for pattern, why in _OUT_OF_SCOPE:
        if re.search(pattern, o.detail):
            return why
    for pattern, why in _GAPS:
        m = re.search(pattern, o.detail)
        if m:
            return "gap (issue 53): " + why.format(*m.groups())
    text = re.sub(r"'[^']*'", "…", o.detail.split("\n")[0])
    return f"gap (issue 53): {o.kind}: {text[:160]}"


def load_expected() -> dict[str, dict[str, str]]:
    """{target: {case: why it does not pass}} from expected.toml."""
    import tomllib

    with open(EXPECTED, "rb") as f:
        table = tomllib.load(f)
    return {target: {case: why for why, names in table.get(target, {}).items() for case in names}
            for target in TARGETS}


def write_expected(failing: dict[str, dict[str, str]]) -> None:
    """expected.toml from {target: {case: why}}: per target, each reason and its cases, sorted."""
    lines = ["# Cases of the ONNX backend suite (tests/onnx_backend) that are not expected to pass, and why.",
             "# `python -m tests.onnx_backend --write-expected` rewrites it from a run; review the diff.",
             "# [reference]: fail on pw.reference, so on every target; [cpu], [aicore]: pass on the",
             "# reference but not on that target.  A listed case that passes fails the test too."]
    for target in TARGETS:
        lines.append(f"\n[{target}]")
        by_reason: dict[str, list[str]] = {}
        for case, why in failing.get(target, {}).items():
            by_reason.setdefault(why, []).append(case)
        for why in sorted(by_reason, key=lambda w: (not w.startswith("out of scope"), w)):
            names = sorted(by_reason[why])
            lines.append(f"{_toml_string(why)} = [")
            lines += [f"    {_toml_string(n)}," for n in names]
            lines.append("]")
    EXPECTED.write_text("\n".join(lines) + "\n")


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def runs_on(name: str, target: str) -> bool:
    """Whether the suite runs a case the reference passes on `target` (a sample: EVERY)."""
    import zlib

    return zlib.crc32(name.encode()) % EVERY[target] == 0


def suite_cases() -> list[str]:
    """The cases this run judges (outside the full run: a sample, and not the light models)."""
    return sorted(n for n, c in cases().items() if FULL or c.suite != "light" and runs_on(n, "reference"))


def judge(name: str) -> dict[str, Outcome]:
    """One case as the test runs it: on the reference, then, where it passes, on cpu and (a
    sample) on aicore."""
    case = cases()[name]
    found = {"reference": outcome(case, "reference")}
    if found["reference"].kind == "pass":
        for target in TARGETS[1:]:
            if runs_on(name, target):
                found[target] = outcome(case, target)
    return found
