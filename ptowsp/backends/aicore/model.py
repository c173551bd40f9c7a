"""`pw.DeviceModel`: the figures of an AICPU–AICore device that the aicore target runs under.

Every field is a documented figure with its source: public figures for an
Ascend 910B-class die where there are some, timings measured on such devices
by the open-source PTO runtime for the AICPU's work, and stated assumptions
where no public figure exists (docs/aicore.md lists which is which).  Any
variant is a `DeviceModel(...)` with other values; the model is frozen so a
built program's device cannot change under it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, model_validator

from ptowsp.errors import BuildError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


def _figure(default: float | int, description: str, source: str, **limits) -> object:
    return Field(default, description=description, json_schema_extra={"source": source}, **limits)


class DeviceModel(BaseModel):
    """An AICPU–AICore device: core counts, clock, AICPU costs, compute rates, buffers, memory."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="wrap")
    @classmethod
    def _typed(cls, data: object, handler: ValidatorFunctionWrapHandler) -> DeviceModel:
        """pydantic's ValidationError as a BuildError naming each bad field, its value and the rule."""
        try:
            return handler(data)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'model'} = {err.get('input')!r}: {err['msg']}"
                                 for err in e.errors())
            raise BuildError(f"invalid pw.DeviceModel: {problems}") from None

    name: str = "ascend-910b-class"
    clusters: int = _figure(24, "AICore clusters on the die", "Ascend 910B public specification: 24 AICores", ge=1)
    cube_per_cluster: int = _figure(1, "cube (matrix) cores per cluster",
                                    "Ascend C docs, separated mode: 1 AIC + 2 AIV per AICore", ge=0)
    vector_per_cluster: int = _figure(2, "vector cores per cluster",
                                      "Ascend C docs, separated mode: 1 AIC + 2 AIV per AICore", ge=0)
    schedulers: int = _figure(3, "AICPU scheduler threads (one more AICPU thread orchestrates)",
                              "PTO runtime: 4 AICPU threads, 1 orchestrator + 3 schedulers", ge=1)
    clock_hz: float = _figure(1.8e9, "AICore clock", "Ascend 910B public specification: 1.8 GHz", gt=0)
    dispatch_seconds: float = _figure(140e-9, "latency of an AICPU writing a task into a core's slot",
                                      "PTO runtime measurement: ~140 ns AICPU->AICore", ge=0)
    completion_seconds: float = _figure(600e-9, "latency of a core's completion notice reaching the AICPU",
                                        "PTO runtime measurement: ~600 ns AICore->AICPU through MMIO "
                                        "(180 ns at best)", ge=0)
    schedule_seconds: float = _figure(1e-6, "scheduler thread work per task: a poll of its cores' completion "
                                      "flags and the dispatch", "PTO runtime measurement: polling 24 cores ~1 us "
                                      "(each of 3 schedulers serves 24 of the 72 cores)", ge=0)
    orchestrate_seconds: float = _figure(1.22e-6, "orchestrator work per task instance it generates",
                                         "PTO runtime measurement: host orchestration 1.22-1.26 us per task warm "
                                         "(2.94 us cold; 3,875 tasks on a Kunpeng-920)", ge=0)
    record_seconds: float = _figure(1.07e-6, "orchestrator work per task instance it records (on top of "
                                    "generating it) when a step is captured", "PTO runtime measurement: graph "
                                    "record 1.07 us per recorded node", ge=0)
    replay_seconds: float = _figure(2.3e-6, "orchestrator work to launch a recorded table (once per replay, in "
                                    "place of generating its instances)", "PTO runtime measurement: 2.3 us per "
                                    "replay (read as one launch of the recorded graph)", ge=0)
    task_switch_seconds: float = _figure(0.8e-6, "a core's switch from one task to the next it holds",
                                         "PTO runtime measurement: AICore task-to-task switch ~0.8 us", ge=0)
    task_slots: int = _figure(2, "task slots per core: one running and the pending ones",
                              "PTO runtime: running + pending slot per core", ge=2)
    cube_macs_per_cycle: int = _figure(16 * 16 * 16, "float16 multiply-accumulates per cycle of a cube unit",
                                       "Da Vinci architecture (Hot Chips 2019): 16x16x16 fp16 cube", ge=1)
    cube_float32_share: float = _figure(0.25, "float32 cube rate as a share of the float16 rate",
                                        "assumption: the cube's float32 mode at a quarter of float16", gt=0, le=1)
    cube_int8_speedup: float = _figure(2.0, "int8 cube rate as a multiple of the float16 rate (int32 accumulation)",
                                       "Ascend 910 specification: 512 TOPS int8, 256 TFLOPS fp16", gt=0)
    cube_fractal: int = _figure(16, "matrix block edge the cube computes in (shorter edges are padded)",
                                "Da Vinci architecture: 16x16 fractal format", ge=1)
    vector_bytes_per_cycle: int = _figure(256, "bytes of operands a vector unit processes per cycle",
                                          "Da Vinci architecture (Hot Chips 2019): 2048-bit vector unit", ge=1)
    ub_bytes: int = _figure(192 * KIB, "Unified Buffer of a vector core", "Ascend 910B: UB 192 KB", ge=1)
    l1_bytes: int = _figure(512 * KIB, "L1 buffer of a cube core", "Ascend 910B: L1 512 KB", ge=1)
    l0a_bytes: int = _figure(64 * KIB, "L0A (left matrix) buffer of a cube core", "Ascend 910B: L0A 64 KB", ge=1)
    l0b_bytes: int = _figure(64 * KIB, "L0B (right matrix) buffer of a cube core", "Ascend 910B: L0B 64 KB", ge=1)
    l0c_bytes: int = _figure(128 * KIB, "L0C (accumulator) buffer of a cube core", "Ascend 910B: L0C 128 KB",
                             ge=1)
    accumulator_bytes: int = _figure(4, "bytes per cube accumulator element (float32 accumulation)",
                                     "Da Vinci architecture: fp16 inputs accumulate in fp32", ge=1)
    hbm_bytes_per_second: float = _figure(1.6e12, "HBM bandwidth, shared by every core",
                                          "Ascend 910B public specification: 1.6 TB/s", gt=0)
    l2_bytes: int = _figure(192 * MIB, "on-die L2 cache in front of HBM, shared",
                            "figure quoted for Atlas A2 (910B) devices; not verified here", ge=0)
    gm_to_l1_bytes_per_second: float = _figure(135.0 * GIB, "a cube core's loads: global memory (L2/HBM) to L1",
                                               "PTO ISA cost model, A2/A3: GM->L1 135 GiB/s", gt=0)
    l0c_to_gm_bytes_per_second: float = _figure(70.0 * GIB, "a cube core's stores: L0C to global memory",
                                                "PTO ISA cost model, A2/A3: L0C->GM 70 GiB/s", gt=0)
    gm_to_ub_bytes_per_second: float = _figure(247.0 * GIB, "a vector core's loads: global memory to UB (the "
                                               "peak the transfer curve saturates at)",
                                               "PTO ISA cost model, A2/A3: GM->UB saturating at 247 GiB/s", gt=0)
    ub_to_gm_bytes_per_second: float = _figure(247.0 * GIB, "a vector core's stores: UB to global memory",
                                               "assumption: the GM->UB peak (no published figure)", gt=0)
    dma_startup_seconds: float = _figure(30.6 * KIB / (247 * GIB), "fixed latency of one DMA transfer",
                                         "PTO ISA cost model, A2/A3: GM->UB half-saturated at 30.6 KB, so "
                                         "30.6 KB / 247 GiB/s = 0.118 us", ge=0)

    @property
    def cube_cores(self) -> int:
        return self.clusters * self.cube_per_cluster

    @property
    def vector_cores(self) -> int:
        return self.clusters * self.vector_per_cluster

    def load_bytes_per_second(self, core: str) -> float:
        """DMA rate into a core of class `core` ("cube": GM->L1, "vector": GM->UB)."""
        return self.gm_to_l1_bytes_per_second if core == "cube" else self.gm_to_ub_bytes_per_second

    def store_bytes_per_second(self, core: str) -> float:
        """DMA rate out of a core of class `core` ("cube": L0C->GM, "vector": UB->GM)."""
        return self.l0c_to_gm_bytes_per_second if core == "cube" else self.ub_to_gm_bytes_per_second

    def core_classes(self) -> tuple[str, ...]:
        """One entry per core, cube cores first: the runtime's worker classes."""
        return ("cube",) * self.cube_cores + ("vector",) * self.vector_cores

    def sources(self) -> dict[str, str]:
        """Each figure's source, for docs and for anyone asking where a number came from (a preset's
        own figures cite the preset's source)."""
        found = {name: field.json_schema_extra["source"] for name, field in type(self).model_fields.items()
                 if isinstance(field.json_schema_extra, dict)}
        preset = next((figures for figures in PRESETS.values() if figures.get("name", (None,))[0] == self.name), {})
        return found | {name: source for name, (value, source) in preset.items()
                        if name != "name" and getattr(self, name) == value}

    @classmethod
    def preset(cls, name: str, **changes: object) -> DeviceModel:
        """A named device: "910b" (the defaults: one die of an Ascend 910B, A2, or of an A3) or "a5";
        `changes` override any figure of it."""
        if name not in PRESETS:
            raise BuildError(f"unknown pw.DeviceModel preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
        return cls(**{field: value for field, (value, _) in PRESETS[name].items()} | changes)


# name -> {field: (value, source)}: what a preset changes from the defaults, each figure with its source
PRESETS: dict[str, dict[str, tuple[object, str]]] = {
    "910b": {},
    "a5": {
        "name": ("ascend-a5-class", "PTO runtime: Ascend a5"),
        "clusters": (18, "PTO runtime, a5: 18 AIC + 36 AIV per die (1 cube + 2 vector cores per cluster)"),
        "schedulers": (4, "PTO runtime, a5: 4 AICPU scheduler threads"),
        "ub_bytes": (256 * KIB, "PTO ISA cost model, A5: UB 256 KB"),
        "l0c_bytes": (256 * KIB, "PTO ISA cost model, A5: L0C 256 KB"),
    },
}
