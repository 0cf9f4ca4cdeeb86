"""Fault injectors, registered under the ``drillbit.faults`` entry point.

Plugins are checked when they are registered (pluggy's habit): a class without a name,
Params model or the four methods is refused with a message naming it and the fix.
"""
from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path

from drillbit.core.errors import DrillError
from drillbit.faults.base import BINDING_PARAMS, Fault, Params, State

# drillbit's own faults; other packages add theirs under the entry point.
_BUILTIN = {
    "kill-rank": "drillbit.faults.kill_rank:KillRank",
    "kill-node": "drillbit.faults.kill_node:KillNode",
    "hang-collective": "drillbit.faults.hang_collective:HangCollective",
    "corrupt-checkpoint": "drillbit.faults.corrupt_checkpoint:CorruptCheckpoint",
    "slow-rank": "drillbit.faults.slow_rank:SlowRank",
    "dataloader-hang": "drillbit.faults.dataloader_hang:DataloaderHang",
    "restore-hang": "drillbit.faults.restore_hang:RestoreHang",
    "throttle-clocks": "drillbit.faults.throttle_clocks:ThrottleClocks",
    "fail-node-replacement": "drillbit.faults.fail_node_replacement:FailNodeReplacement",
    "kill-during-save": "drillbit.faults.kill_during_save:KillDuringSave",
    "node-down": "drillbit.faults.slurm_node:NodeDown",
    "node-crash": "drillbit.faults.slurm_node:NodeCrash",
    "lose-local-tier": "drillbit.faults.lose_local_tier:LoseLocalTier",
    "partition": "drillbit.faults.partition:Partition",
    "lossy-link": "drillbit.faults.partition:LossyLink",
    "flap": "drillbit.faults.partition:Flap",
    "slow-link": "drillbit.faults.partition:SlowLink",
    "kill-control-plane": "drillbit.faults.kill_control_plane:KillControlPlane",
}


def _load(ref: str) -> type[Fault]:
    module, _, attr = ref.partition(":")
    mod = __import__(module, fromlist=[attr])
    return getattr(mod, attr)


def check_plugin(source: str, cls: object) -> type[Fault]:
    if not isinstance(cls, type) or not issubclass(cls, Fault):
        raise DrillError(f"fault plugin {source}: {cls!r} is not a subclass of drillbit.faults.base.Fault")
    if not getattr(cls, "name", None):
        raise DrillError(f"fault plugin {source}: set the class attribute `name` (e.g. 'kill-rank')")
    if not (isinstance(cls.Params, type) and issubclass(cls.Params, Params)):
        raise DrillError(f"fault plugin {source}: `Params` must subclass drillbit.faults.base.Params")
    if not (isinstance(cls.State, type) and issubclass(cls.State, State)):
        raise DrillError(f"fault plugin {source}: `State` must subclass drillbit.faults.base.State")
    for method in ("plan", "confirm", "heal"):
        if getattr(cls, method) is getattr(Fault, method):
            raise DrillError(f"fault plugin {source}: implement `{method}`")
    for binding in cls.binds:
        missing = [n for n in BINDING_PARAMS.get(binding, ()) if n not in cls.Params.model_fields]
        if binding not in BINDING_PARAMS or missing:
            raise DrillError(f"fault plugin {source}: binds {binding!r} " + (
                f"needs the param(s) {', '.join(missing)}" if binding in BINDING_PARAMS
                else f"is not a binding (known: {', '.join(BINDING_PARAMS)})"))
    if cls.needs_checkpoint and "checkpoint" not in cls.binds:
        raise DrillError(f"fault plugin {source}: needs_checkpoint without binds 'checkpoint': where would the "
                         "job's checkpoints come from?")
    two_step = cls.prepare is not Fault.prepare and cls.act is not Fault.act
    if cls.inject is Fault.inject and not two_step:
        raise DrillError(f"fault plugin {source}: implement `prepare` and `act` (record, then act), or `inject`")
    return cls


@lru_cache(maxsize=1)
def registry() -> dict[str, type[Fault]]:
    found: dict[str, type[Fault]] = {}
    refs = dict(_BUILTIN)
    for ep in entry_points(group="drillbit.faults"):
        refs[ep.name] = ep.value
    for name, ref in refs.items():
        cls = check_plugin(ref, _load(ref))
        if cls.name != name:
            raise DrillError(f"fault plugin {ref}: registered as {name!r} but its name is {cls.name!r}")
        found[name] = cls
    return found


def get(name: str, scratch: Path | None = None) -> Fault:
    """A fresh instance of the fault (it may hold live state, such as a duty-cycle thread)."""
    try:
        cls = registry()[name]
    except KeyError:
        raise DrillError(f"unknown fault {name!r}; known: {', '.join(sorted(registry()))}") from None
    return cls(scratch)
