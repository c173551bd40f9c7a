# `make demo` and `make test` work on a fresh machine with nothing but Python:
# each creates .venv and installs the package (editable) with its test extra,
# re-installing only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test fuzz conformance-onnx clean

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check --no-compile -e '.[test]'
	touch $(STAMP)

# the transformer block built by ptowsp, timed beside plain numpy (and torch, when installed),
# checked against pw.reference; the trace of a warm run goes to demo-out/
demo: $(STAMP)
	$(VPY) examples/transformer_demo.py

# one pytest worker per core (pytest-xdist); idle workers steal queued tests from busy ones.
# The whole suite for the host CPU, then the conformance catalogue, lowering, schedule and
# AutoScheduler tests again for the other x86-64 level (PTOWSP_CPU: x86-64-v3 on an AVX-512 host,
# x86-64-v4 on an AVX2 one, where its code is built and read but not run; docs/testing.md).
# The run ends on pytest's own summary line, which CI reads.  PTOWSP_VERIFY=1: the loop IR is checked
# after every lowering pass (ptowsp/lower/verify.py).
# (not what no CPU decides: the numpy, aicore and emulated cuda targets, the reference, the dask cluster's
# plumbing, and the whole-model search's, whose per-kernel spaces test_search covers)
# The search's own mechanics (test_search, test_result: crashes, seeds, resuming) are the host pass's;
# the second level checks what the level decides in it: its space, features and cost model.
ISA_TESTS := tests/conformance tests/lower tests/schedules tests/autoschedule/test_space.py \
	tests/autoschedule/test_features.py tests/autoschedule/test_cost_model.py tests/autoschedule/test_records.py \
	-k "not numpy and not aicore and not cuda and not dask and not model_search"

test: $(STAMP)
	PTOWSP_VERIFY=1 $(VPY) -m pytest -n auto --dist worksteal
	level=$$($(VPY) -m tests.isa_levels); \
	if [ -n "$$level" ]; then PTOWSP_VERIFY=1 PTOWSP_CPU=$$level PTOWSP_RANDOM_SCHEDULES=1 $(VPY) -m pytest -n auto --dist worksteal $(ISA_TESTS); fi

# the ONNX standard's backend suite in full: every case the reference passes on cpu, the light
# model-zoo models, a larger aicore sample (`make test` runs the reference and a sample: tests/onnx_backend)
conformance-onnx: $(STAMP)
	PTOWSP_ONNX_SUITE=full $(VPY) -m pytest -n auto --dist worksteal tests/onnx_backend

# thousands of random legal schedules on every compiled target (not part of `make test`)
fuzz: $(STAMP)
	$(VPY) -m tests.conformance.fuzz --pairs $(or $(PAIRS),5000)
	$(VPY) -m tests.conformance.tensorize_fuzz --pairs $(or $(PAIRS),5000)
	$(VPY) -m tests.conformance.warp_tensorize_fuzz --small --jobs 2 --pairs $(or $(WARP_PAIRS),200)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
