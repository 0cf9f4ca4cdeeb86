"""throttle-clocks (fail-slow) on NVIDIA GPUs through NVML (package nvidia-ml-py: pynvml).

Two methods: ``lock-clocks`` locks the GPU's graphics clocks to a range below its maximum
(nvmlDeviceSetGpuLockedClocks), ``power-limit`` lowers the board power limit
(nvmlDeviceSetPowerManagementLimit) — how a hot or power-capped GPU behaves. The previous
power limit is read before and restored exactly, and read back to verify; locked clocks
are reset with nvmlDeviceResetGpuLockedClocks (NVML cannot read back a lock that was
already in place, so heal returns the GPU to the driver's default range).

Proof of effect: the power limit read back equals the one set; or, for locked clocks, the
SM clock read under the job's load is at or under the cap. Both need root on the host.

Which GPU: ``gpu_index``, else the target rank's LOCAL_RANK (CUDA_VISIBLE_DEVICES applied).
On a machine without a GPU there is nothing to throttle: use ``slow-rank``.
"""
from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import Field, model_validator

from drillbit.core.evidence import Throttled
from drillbit.core.errors import FaultError
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan, State
from drillbit.core.proc import ProcRef


def nvml() -> Any:
    """The NVML binding; imported lazily so drillbit runs where there is none."""
    try:
        import pynvml
    except ImportError as exc:
        raise FaultError("throttle-clocks needs NVML: pip install 'drillbit[gpu]' (nvidia-ml-py)") from exc
    return pynvml


class ThrottleParams(Params):
    method: Literal["lock-clocks", "power-limit"] = "lock-clocks"
    clock_fraction: float = Field(0.5, gt=0, le=1, description="lock-clocks: cap as a fraction of the max SM clock")
    clock_mhz: int | None = Field(None, gt=0, description="lock-clocks: an explicit cap instead")
    power_fraction: float = Field(0.6, gt=0, le=1, description="power-limit: fraction of the current limit")
    gpu_index: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _sane(self) -> "ThrottleParams":
        if self.method == "power-limit" and self.clock_mhz is not None:
            raise ValueError("clock_mhz applies to lock-clocks, not power-limit")
        return self


def gpu_of(target: ProcRef, params: ThrottleParams) -> int:
    if params.gpu_index is not None:
        return params.gpu_index
    proc = target.process()
    if proc is None:
        raise FaultError(f"rank {target.rank} (pid {target.pid}) is gone")
    env = proc.environ()
    if "LOCAL_RANK" not in env:  # never guess: throttling the wrong GPU hurts another job
        raise FaultError(f"cannot tell which GPU rank {target.rank} (pid {target.pid}) uses: no LOCAL_RANK "
                         "in its environment; set gpu_index in the fault's params")
    local = int(env["LOCAL_RANK"])
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if local >= len(ids):
            raise FaultError(f"rank {target.rank}: LOCAL_RANK {local} but CUDA_VISIBLE_DEVICES lists {len(ids)} "
                             "device(s); set gpu_index in the fault's params")
        if not ids[local].isdigit():  # a UUID (GPU-…, MIG-…): LOCAL_RANK's index would name another GPU
            raise FaultError(f"rank {target.rank} sees GPU {ids[local]!r} by UUID; drillbit does not map UUIDs "
                             "to NVML indices, so set gpu_index in the fault's params")
        return int(ids[local])
    return local


def snapshot(lib: Any, handle: Any) -> dict[str, Any]:
    """What the GPU says about itself: clocks and power, for the report and for restore."""
    out: dict[str, Any] = {}
    for key, call in (("sm_clock_mhz", lambda: lib.nvmlDeviceGetClockInfo(handle, lib.NVML_CLOCK_SM)),
                      ("max_sm_clock_mhz", lambda: lib.nvmlDeviceGetMaxClockInfo(handle, lib.NVML_CLOCK_SM)),
                      ("power_limit_mw", lambda: lib.nvmlDeviceGetPowerManagementLimit(handle)),
                      ("power_limit_min_max_mw", lambda: list(lib.nvmlDeviceGetPowerManagementLimitConstraints(handle))),
                      ("power_usage_mw", lambda: lib.nvmlDeviceGetPowerUsage(handle))):
        try:
            out[key] = call()
        except lib.NVMLError as exc:  # not every board reports every value
            out[key] = f"n/a ({exc})"
    return out


class ThrottleState(State):
    gpu_index: int
    method: Literal["lock-clocks", "power-limit"]
    before: dict[str, Any]
    locked_max_mhz: int | None = None
    previous_power_limit_mw: int | None = None
    power_limit_set_mw: int | None = None


class ThrottleClocks(Fault[ThrottleParams, ThrottleState]):
    name = "throttle-clocks"
    needs = ("root on the host (NVML's set-clocks and power-limit calls), a NVIDIA GPU and nvidia-ml-py")
    blast_radius = ("one GPU's locked clocks or power limit: every process on that GPU slows, not only the job's")
    evidence = (Throttled,)
    verb = "throttled"
    fault_class = "fail-slow"
    Params = ThrottleParams
    State = ThrottleState
    expects = "slow"

    def plan(self, targets: list[ProcRef], params: ThrottleParams) -> Plan:
        what = (f"lock SM clocks to {params.clock_mhz} MHz" if params.clock_mhz else
                f"lock SM clocks to {params.clock_fraction:.0%} of max") if params.method == "lock-clocks" \
            else f"set the power limit to {params.power_fraction:.0%} of the current one"
        return Plan(fault=self.name, targets=targets, action=f"{what} on each target's GPU",
                    heal="reset locked clocks / restore the previous power limit exactly, then read back")

    def prepare(self, target: ProcRef, params: ThrottleParams) -> ThrottleState:
        """Which GPU, and its settings now (what heal puts back), read before any change."""
        lib = nvml()
        lib.nvmlInit()
        index = gpu_of(target, params)
        before = snapshot(lib, lib.nvmlDeviceGetHandleByIndex(index))
        state = ThrottleState(gpu_index=index, before=before, method=params.method)
        if params.method == "lock-clocks":
            state.locked_max_mhz = params.clock_mhz or int(before["max_sm_clock_mhz"] * params.clock_fraction)
        else:
            previous = int(before["power_limit_mw"])
            low = int(before["power_limit_min_max_mw"][0])
            state.previous_power_limit_mw = previous
            state.power_limit_set_mw = max(low, int(previous * params.power_fraction))
        return state

    def act(self, target: ProcRef, params: ThrottleParams, intent: ThrottleState) -> ThrottleState:
        lib = nvml()
        dev = lib.nvmlDeviceGetHandleByIndex(intent.gpu_index)
        try:
            if intent.method == "lock-clocks":
                lib.nvmlDeviceSetGpuLockedClocks(dev, 0, intent.locked_max_mhz)
            else:
                lib.nvmlDeviceSetPowerManagementLimit(dev, intent.power_limit_set_mw)
        except lib.NVMLError as exc:  # refused: nothing changed
            raise FaultError(f"NVML refused {params.method} on GPU {intent.gpu_index}: {exc} (root needed?)") from exc
        return intent

    def confirm(self, target: ProcRef, params: ThrottleParams, state: ThrottleState) -> Evidence | None:
        lib = nvml()
        dev = lib.nvmlDeviceGetHandleByIndex(state.gpu_index)
        deadline = time.time() + 5
        while time.time() < deadline:
            now = snapshot(lib, dev)
            if state.method == "power-limit":
                if now["power_limit_mw"] == state.power_limit_set_mw:
                    return Evidence(what="power limit lowered", data={"before": state.before, "during": now})
            elif isinstance(now["sm_clock_mhz"], int) and now["sm_clock_mhz"] <= (state.locked_max_mhz or 0):
                return Evidence(what="SM clock at or under the cap",
                                data={"before": state.before, "during": now, "locked_max_mhz": state.locked_max_mhz})
            time.sleep(0.2)
        return None

    def heal(self, target: ProcRef, params: ThrottleParams, state: ThrottleState) -> HealReport:
        lib = nvml()
        lib.nvmlInit()
        dev = lib.nvmlDeviceGetHandleByIndex(state.gpu_index)
        try:
            if state.method == "power-limit":
                previous = state.previous_power_limit_mw
                lib.nvmlDeviceSetPowerManagementLimit(dev, previous)
                after = snapshot(lib, dev)
                ok = after["power_limit_mw"] == previous
                detail = f"power limit back to {previous} mW" if ok else f"power limit reads {after['power_limit_mw']} mW"
            else:
                lib.nvmlDeviceResetGpuLockedClocks(dev)
                after = snapshot(lib, dev)
                ok, detail = True, f"locked clocks reset; SM clock now {after['sm_clock_mhz']} MHz"
        except lib.NVMLError as exc:
            return HealReport(healed=False, verified=False, detail=f"NVML refused the restore: {exc}")
        return HealReport(healed=ok, verified=ok, detail=detail)
