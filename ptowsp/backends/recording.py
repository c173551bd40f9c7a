"""Capture and replay (`prog.capture(**inputs)`): one step's task table recorded, then replayed for the
next steps with new data, as CUDA graphs and the PTO runtime's graph record/replay do.

A decode step of an LLM has the same tasks every step while its data moves: the context lengths,
the block tables, the new tokens.  A `Recording` pins the binding of the sizes the capture ran at,
with everything worked out for it once (the task table with its dependencies, the memory plan,
the native loop's instances: cpu/setup.py's RunSetup).  A replay then only

- checks that the inputs have the recorded shapes and dtypes (one tuple comparison per input);
- decides from the new data which tiles of a task with a domain have work (a sequence's context
  past a block), for all of a task's tiles at once, and marks the others skipped;
- writes the new arrays' addresses into the pointer table the kernels read (block tables and
  caches are inputs like any other: nothing is copied);
- runs the recorded table.

The sizes are the recording's: a step whose inputs give other sizes (a larger batch, a longer block
table) raises InputError naming the size, and needs a capture of its own (or its batch padded to
the recorded one, as serving engines pad to their captured graphs).  On the device clock a replay
is modelled as the PTO runtime's: the orchestrator launches the recorded table once
(`DeviceModel.replay_seconds`) instead of generating each instance, and the capture pays
`record_seconds` per instance on top of generating it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from ptowsp.errors import BuildError, InputError
from ptowsp.runtime import Options
from ptowsp.workloads.inputs import input_sizes, read_only, validate_inputs
from ptowsp.workloads.workload import Workload


class Recording:
    """One step of a built program, recorded at the binding of the sizes its inputs gave; `replay`
    (or calling it) runs it again on new inputs of the same shapes."""

    def __init__(self, workload: Workload, target: str, executable, options: Options, inputs: Mapping[str, np.ndarray]):
        if not hasattr(executable, "run_at"):
            raise BuildError(f"capture and replay run on the cpu and aicore targets, not {target!r}")
        self.workload, self.target = workload, target
        self._executable = executable
        self._replaying = dataclasses.replace(options, orchestration="replay", title=f"{options.title}, replayed")
        checked = validate_inputs(workload, inputs)
        self.sizes: dict[str, int] = input_sizes(workload, checked) if workload.size_sources else {}
        self._setup = executable.setup_for(self.sizes)  # held here: the executable keeps only recent ones
        self._names = tuple(workload.inputs)
        self._signature = tuple((checked[n].shape, checked[n].dtype) for n in self._names)
        self._native = self._setup.native is not None and not options.debug
        self.replays = 0
        self.outputs, self.trace = executable.run_at(self._setup, checked,
                                                      dataclasses.replace(options, orchestration="record",
                                                                          title=f"{options.title}, captured"))
        self.trace.cold = True

    @property
    def tasks(self) -> int:
        """Task instances in the recorded table (tiles a step's data leaves without work included;
        with specialized tasks, whose table each run makes, those the capture ran)."""
        if self._setup.table is not None:
            return len(self._setup.table)
        return sum(e.id >= 0 for e in self.trace.events) + self.trace.statistics.get("skipped", 0)

    def replay(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Run the recorded step on `inputs` (the recorded shapes and dtypes; any values); the outputs
        as `run` gives them, the trace in `self.trace`."""
        values = [inputs.get(name) for name in self._names]
        if len(inputs) != len(self._names) or not all(isinstance(v, np.ndarray) for v in values) \
                or tuple((v.shape, v.dtype) for v in values) != self._signature:  # type: ignore[union-attr]
            self._refuse(inputs)
        # compiled kernels never write an input: on the native loop the caller's arrays go as they are
        # (an array passed again is not looked at again); Python task code gets read-only views
        checked = dict(zip(self._names, values)) if self._native else \
            {name: read_only(v) for name, v in zip(self._names, values)}  # type: ignore[arg-type]
        outputs, self.trace = self._executable.run_at(self._setup, checked, self._replaying)
        self.trace.cold = False
        self.replays += 1
        return outputs

    __call__ = replay

    def _refuse(self, inputs: Mapping[str, object]) -> None:
        """The InputError saying how `inputs` differ from the recorded step's."""
        checked = validate_inputs(self.workload, inputs)  # raises for a missing, stray or malformed input
        sizes = input_sizes(self.workload, checked) if self.workload.size_sources else {}
        moved = [f"{n}={v} (recorded at {self.sizes[n]})" for n, v in sizes.items() if v != self.sizes[n]]
        if not moved:
            raise InputError(f"workload {self.workload.name!r}: give a replay every input of the recorded step, "
                             "by name, as the capture had them")
        raise InputError(f"workload {self.workload.name!r}: this step's sizes differ from the recording's: "
                         f"{', '.join(moved)}; a replay runs the recorded table, so capture this binding too "
                         "(prog.capture) or pad the step to the recorded sizes")

    def __repr__(self) -> str:
        bound = ", ".join(f"{n}={v}" for n, v in self.sizes.items())
        return f"Recording({self.workload.name!r}, target={self.target!r}, {bound or 'static'}, {self.tasks} tasks)"
