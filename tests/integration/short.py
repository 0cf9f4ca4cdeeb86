"""Broken-path drills wait out their observation window (the recovery never comes), so the
tests give them a short one: the window, and every time limit under it (a missing signal is
a breach only once the drill watched longer than its limit). The verdict and its reason are
the same as with the catalogue's window; only the wait is shorter."""
from __future__ import annotations

from dataclasses import replace

from drillbit.runs.session import Resolved

LIMITS = ("detect_within", "restart_within", "restore_within", "first_step_within", "straggler_within",
          "recover_or_escalate_within")


def short_window(resolved: Resolved, window: float) -> Resolved:
    spec = resolved.spec
    limits = {k: min(v, window - 5) for k in LIMITS if (v := getattr(spec.slo, k)) is not None}
    spec = spec.model_copy(update={"observe": spec.observe.model_copy(update={"window": window}),
                                   "slo": spec.slo.model_copy(update=limits)})
    return replace(resolved, spec=spec)
