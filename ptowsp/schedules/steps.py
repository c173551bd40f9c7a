"""Schedule steps as data: one pydantic model per step, replayed in order.

A schedule is nothing but its list of steps.  Saving it writes the steps as
JSON; loading replays them through the same validation a user's calls go
through, so a loaded schedule is identical to the one saved (or is refused
with the same ScheduleError).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

SCOPES = ("local", "shared", "ub")
THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
CORE_CLASSES = ("cube", "vector")
DISPATCH_POLICIES = ("round_robin", "work_stealing", "affinity", "locality", "heft")


class _Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def call(self) -> str:
        """The step as the user would have written it: `split('C', 'k', 8)`."""
        fields = self.model_dump(exclude={"kind"}, exclude_none=True)
        args = []
        for name, value in fields.items():
            if name in self.keyword_fields:
                args.append(f"{name}={value!r}")
            elif isinstance(value, (list, tuple)) and name in self.star_fields:
                args.extend(repr(v) for v in value)
            elif isinstance(value, dict):
                args.extend(f"{k}={v!r}" if k.isidentifier() else f"{{{k!r}: {v!r}}}" for k, v in value.items())
            else:
                args.append(repr(value))
        return f"{self.kind}({', '.join(args)})"  # type: ignore[attr-defined]

    keyword_fields: ClassVar[frozenset[str]] = frozenset()  # printed as name=value
    star_fields: ClassVar[frozenset[str]] = frozenset()  # lists printed as separate arguments


class Split(_Step):
    kind: Literal["split"] = "split"
    task: str
    loop: str
    factor: int


class Tile(_Step):
    kind: Literal["tile"] = "tile"
    task: str
    factors: dict[str, int]


class Reorder(_Step):
    kind: Literal["reorder"] = "reorder"
    task: str
    loops: list[str]
    star_fields = frozenset({"loops"})


class Fuse(_Step):
    kind: Literal["fuse"] = "fuse"
    task: str
    outer: str
    inner: str


class Vectorize(_Step):
    kind: Literal["vectorize"] = "vectorize"
    task: str
    loop: str


class Unroll(_Step):
    kind: Literal["unroll"] = "unroll"
    task: str
    loop: str


class Parallel(_Step):
    kind: Literal["parallel"] = "parallel"
    task: str
    loops: list[str]
    star_fields = frozenset({"loops"})


class ComputeInline(_Step):
    kind: Literal["compute_inline"] = "compute_inline"
    task: str


class ComputeAt(_Step):
    kind: Literal["compute_at"] = "compute_at"
    task: str
    consumer: str
    loop: str


class CacheRead(_Step):
    kind: Literal["cache_read"] = "cache_read"
    task: str
    tensor: str
    scope: str
    loop: str | None = None


class PrefetchTensor(_Step):
    kind: Literal["prefetch_tensor"] = "prefetch_tensor"
    task: str
    tensor: str
    loop: str
    ahead: int = 1
    keyword_fields = frozenset({"ahead"})


class CacheWrite(_Step):
    kind: Literal["cache_write"] = "cache_write"
    task: str
    scope: str


class FuseTasks(_Step):
    kind: Literal["fuse_tasks"] = "fuse_tasks"
    producer: str
    consumer: str


class FuseByCategory(_Step):
    kind: Literal["fuse_by_category"] = "fuse_by_category"


class Dispatch(_Step):
    kind: Literal["dispatch"] = "dispatch"
    policy: str
    key: list[str] | None = None
    keyword_fields = frozenset({"key"})


class Prefetch(_Step):
    kind: Literal["prefetch"] = "prefetch"
    depth: int


class Bind(_Step):
    kind: Literal["bind"] = "bind"
    task: str
    loop: str | None = None
    thread: str | None = None
    core: str | None = None
    kernel: str | None = None
    keyword_fields = frozenset({"core", "kernel"})


class TransformLayout(_Step):
    """Store `tensor` in another layout: element (axes) goes to (index...), each index integer
    arithmetic over the axes, kept as text and parsed back without `eval` (condition.py)."""

    kind: Literal["transform_layout"] = "transform_layout"
    tensor: str
    axes: list[str]
    index: list[str]

    def call(self) -> str:
        tail = "," if len(self.index) == 1 else ""
        return f"transform_layout({self.tensor!r}, lambda {', '.join(self.axes)}: ({', '.join(self.index)}{tail}))"


LoopStep = Annotated[Split | Tile | Reorder | Fuse | Vectorize | Unroll | Parallel, Field(discriminator="kind")]
LOOP_STEPS = (Split, Tile, Reorder, Fuse, Vectorize, Unroll, Parallel)


class Specialize(_Step):
    """A variant of a task's loops for the tiles where `when` holds (a condition over the task's
    loop variables, sizes and integer inputs, as Python source): loop steps on top of the task's
    loops at this point of the schedule."""

    kind: Literal["specialize"] = "specialize"
    task: str
    when: str
    steps: list[LoopStep]

    def call(self) -> str:
        variant = "".join(f".{s.call()}" for s in self.steps)
        return f"specialize({self.task!r}, {self.when!r}, lambda v: v{variant})"


Step = Annotated[
    Split | Tile | Reorder | Fuse | Vectorize | Unroll | Parallel | ComputeInline | ComputeAt | CacheRead
    | PrefetchTensor | CacheWrite | FuseTasks | FuseByCategory | Dispatch | Prefetch | Bind | Specialize | TransformLayout,
    Field(discriminator="kind"),
]


class ScheduleRecord(BaseModel):
    """What `Schedule.to_json` writes: the workload it belongs to and its steps."""

    model_config = ConfigDict(extra="forbid")

    workload: str
    fingerprint: str
    steps: list[Step]
