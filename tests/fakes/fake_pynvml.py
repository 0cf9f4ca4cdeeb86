"""A FAKE NVML (pynvml) for machines without an NVIDIA GPU.

It keeps per-device state (clocks, locked range, power limit) and answers the calls that
drillbit's throttle-clocks fault makes, with NVML's names and errors. Under load, the SM
clock follows the locked cap and the power limit like a real board would, roughly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM = 0, 1


class NVMLError(Exception):
    pass


@dataclass
class Device:
    max_sm: int = 1980
    power_limit: int = 700_000
    power_min: int = 200_000
    power_max: int = 700_000
    locked: tuple[int, int] | None = None
    calls: list[str] = field(default_factory=list)

    def sm_clock(self) -> int:
        clock = self.max_sm
        if self.locked is not None:
            clock = min(clock, self.locked[1])
        return int(clock * min(1.0, self.power_limit / self.power_max) ** 0.5)


DEVICES: list[Device] = []
initialised = False
allow_writes = True


def reset(count: int = 2) -> None:
    global initialised, allow_writes
    DEVICES[:] = [Device() for _ in range(count)]
    initialised, allow_writes = False, True


def nvmlInit() -> None:
    global initialised
    initialised = True


def _dev(handle: int) -> Device:
    if not initialised:
        raise NVMLError("Uninitialized")
    return DEVICES[handle]


def nvmlDeviceGetCount() -> int:
    return len(DEVICES)


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if index >= len(DEVICES):
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetClockInfo(handle: int, clock: int) -> int:
    return _dev(handle).sm_clock()


def nvmlDeviceGetMaxClockInfo(handle: int, clock: int) -> int:
    return _dev(handle).max_sm


def nvmlDeviceGetPowerManagementLimit(handle: int) -> int:
    return _dev(handle).power_limit


def nvmlDeviceGetPowerManagementLimitConstraints(handle: int) -> tuple[int, int]:
    d = _dev(handle)
    return d.power_min, d.power_max


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return int(_dev(handle).power_limit * 0.9)


def nvmlDeviceSetGpuLockedClocks(handle: int, low: int, high: int) -> None:
    d = _dev(handle)
    if not allow_writes:
        raise NVMLError("Insufficient Permissions")
    d.locked = (low, high)
    d.calls.append(f"lock {low}-{high}")


def nvmlDeviceResetGpuLockedClocks(handle: int) -> None:
    d = _dev(handle)
    d.locked = None
    d.calls.append("reset-lock")


def nvmlDeviceSetPowerManagementLimit(handle: int, milliwatts: int) -> None:
    d = _dev(handle)
    if not allow_writes:
        raise NVMLError("Insufficient Permissions")
    if not d.power_min <= milliwatts <= d.power_max:
        raise NVMLError("Invalid Argument")
    d.power_limit = milliwatts
    d.calls.append(f"power {milliwatts}")
