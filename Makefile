# `make demo` and `make test` work on a fresh machine with nothing but Python:
# each creates .venv and installs the package (editable) with its test extra,
# re-installing only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test fuzz clean

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check --no-compile -e '.[test]'
	touch $(STAMP)

# the transformer block built by ptowsp, timed beside plain numpy (and torch, when installed),
# checked against pw.reference; the trace of a warm run goes to demo-out/
demo: $(STAMP)
	$(VPY) examples/transformer_demo.py

# one pytest worker per core (pytest-xdist); idle workers steal queued tests from busy ones.
# The run ends on pytest's own summary line, which CI reads.
test: $(STAMP)
	$(VPY) -m pytest -n auto --dist worksteal

# thousands of random legal schedules on every compiled target (not part of `make test`)
fuzz: $(STAMP)
	$(VPY) -m tests.conformance.fuzz --pairs $(or $(PAIRS),5000)
	$(VPY) -m tests.conformance.tensorize_fuzz --pairs $(or $(PAIRS),5000)
	$(VPY) -m tests.conformance.warp_tensorize_fuzz --small --jobs 2 --pairs $(or $(WARP_PAIRS),200)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
