"""The goodput ledger: the observed window's wall time split into productive time and badput.

The window runs from steady state to the end of observation. Every second of it lands
in exactly one category, so the categories add up to the wall time:

  productive               distinct new steps x baseline step time (a replayed step counts once)
  detection                fault -> first detection (all of the disruption if never detected)
  infrastructure_recovery  detection -> restore begins (restart, rendezvous, re-init)
  checkpoint_restore       the restore itself (its own ``seconds``)
  wasted_progress          steps computed twice (replayed after a restore) x baseline
  checkpoint_save          ckpt.save seconds outside the disruption
  slowdown                 step time above baseline while a fail-slow fault is active
  other                    the rest of training time: jitter, a restarted group's first step

The disruption's three categories are intervals of the window; the training time left is
shared out in the order above, each capped by what remains, so no category is negative
and the categories sum to the window exactly (steps faster than the baseline make
``productive`` all of the training time, not more).

``goodput = productive / wall``. Names map onto Google's ml-goodput-measurement badput
buckets where they mean the same (``BUCKETS``).
"""
from __future__ import annotations

from pydantic import BaseModel, Field

from drillbit.judging.checks.recovery import Measurements
from drillbit.core.events import Restore, Save, Step
from drillbit.core.history import History

BUCKETS = {
    "productive": "productive time",
    "detection": "custom: detection delay",
    "infrastructure_recovery": "infrastructure recovery from disruption",
    "checkpoint_restore": "checkpoint restore",
    "wasted_progress": "wasted progress from disruption",
    "checkpoint_save": "checkpoint save",
    "slowdown": "custom: fail-slow tax",
    "other": "other",
}


class Ledger(BaseModel):
    wall_s: float
    productive_s: float = 0.0
    detection_s: float = 0.0
    infrastructure_recovery_s: float = 0.0
    checkpoint_restore_s: float = 0.0
    wasted_progress_s: float = 0.0
    checkpoint_save_s: float = 0.0
    slowdown_s: float = 0.0
    other_s: float = 0.0
    # the disruption's intervals (category, start, end): what the timeline shades
    spans: list[tuple[str, float, float]] = Field(default_factory=list, exclude=True)

    def categories(self) -> dict[str, float]:
        return {name: getattr(self, f"{name}_s") for name in BUCKETS}

    @property
    def goodput(self) -> float:
        return self.productive_s / self.wall_s if self.wall_s > 0 else 0.0


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def ledger(history: History, m: Measurements) -> Ledger | None:
    steady = history.first("steady")
    if steady is None or m.baseline_step_s is None or m.t_observe_end is None or m.t_observe_end <= steady.t:
        return None
    start, end, base = steady.t, m.t_observe_end, m.baseline_step_s
    led = Ledger(wall_s=end - start)
    lines = history.steps()
    for e in history.unread_steps():
        if e.t <= end:
            Step.of(e)  # raises: a step in the window it cannot read leaves the ledger unknown
    high = max((s.n for s in lines if s.t <= start), default=0)
    ahead = [s.n for s in lines if start < s.t <= end and s.n > high]
    new = set(ahead)
    led.productive_s = len(new) * base
    led.wasted_progress_s = (len(ahead) - len(new)) * base

    # the disruption: from the fault to when the job trains again
    slow_fault = m.expects == "slow"  # recorded by the runner with fault.confirmed
    d0 = d1 = None
    if m.t_fault is not None and not slow_fault:
        d0 = max(start, m.t_fault)
        if m.time_to_restore is not None:
            d1 = m.t_fault + m.time_to_restore
        elif m.time_to_restart is not None and m.time_to_first_step is not None:
            d1 = m.t_fault + m.time_to_restart
        elif m.time_to_first_step is not None:
            d1 = max(d0, m.t_fault + m.time_to_first_step - base)
        else:
            d1 = end
        d1 = min(max(d1, d0), end)
        t_detect = m.t_fault + m.time_to_detect if m.time_to_detect is not None else d1
        t_detect = min(max(t_detect, d0), d1)
        led.detection_s = t_detect - d0
        restore = history.first("restore", after=m.t_fault)
        if m.time_to_restore is not None and restore is not None:
            t_restore_begin = min(max(d1 - (Restore.of(restore).seconds or 0.0), t_detect), d1)
        else:
            t_restore_begin = d1
        led.infrastructure_recovery_s = t_restore_begin - t_detect
        led.checkpoint_restore_s = d1 - t_restore_begin
        led.spans = [("detection", d0, t_detect), ("infrastructure_recovery", t_detect, t_restore_begin),
                     ("checkpoint_restore", t_restore_begin, d1)]
    for save in history.of("ckpt.save"):
        t1, t0 = save.t, save.t - (Save.of(save).seconds or 0.0)
        inside = _overlap(t0, t1, start, end)
        if d0 is not None and d1 is not None:
            inside -= _overlap(t0, t1, max(d0, start), min(d1, end))
        led.checkpoint_save_s += max(0.0, inside)
    slowdown = 0.0
    if slow_fault and m.t_fault is not None:
        heal = history.first("fault.heal", after=m.t_fault)
        active_end = min(heal.t if heal else end, end)
        active = [s.event for s in lines if start < s.t <= end and m.t_fault < s.t <= active_end]
        slowdown = sum(max(0.0, (dt if (dt := Step.of(e).dt) is not None else base) - base) for e in active)
        led.spans = [("slowdown", max(start, m.t_fault), active_end)]
    # the training time is shared out in this order, each category capped by what is left,
    # so no category is negative and together they are the window exactly (steps faster than
    # the baseline make productive all of the time they took, not more)
    left = max(0.0, led.wall_s - led.detection_s - led.infrastructure_recovery_s - led.checkpoint_restore_s)
    for name, want in (("productive_s", led.productive_s), ("wasted_progress_s", led.wasted_progress_s),
                       ("checkpoint_save_s", led.checkpoint_save_s), ("slowdown_s", slowdown)):
        take = min(max(0.0, want), left)
        setattr(led, name, take)
        left -= take
    led.other_s = left
    return led

