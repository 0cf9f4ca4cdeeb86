"""Binding a fault to the job profile: each fault declares what it takes from the profile
(``Fault.binds``) — the job's checkpoint, a tier's folder, the per-node launcher, the
node-replacement hook — and the param it goes into. The drill's own params win; what they
leave unset comes from the profile, its placeholders filled for this run. Nothing is
guessed from a param's name.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Any, Callable


from drillbit.spec.checkpoints import CheckpointSpec
from drillbit.core.errors import ConfigError
from drillbit.faults import get as get_fault
from drillbit.spec.config import JobProfile
from drillbit.spec.models import DrillSpec
from drillbit.spec.placeholders import expand


# each node's placeholder values as the job was launched ({port}), None before the launch
Launched = dict[str, dict[str, str]] | None


def job_folder(job: JobProfile, run_dir: Path) -> str:
    """The job's working folder, against which the paths its profile gives relative are taken:
    its launch ``cwd`` (itself relative to where drill runs), else where drill runs."""
    cwd = job.launch.cwd if job.launch is not None else None
    return os.path.abspath(expand(cwd, {"run_dir": str(run_dir)})) if cwd else os.getcwd()


def job_path(path: str, job: JobProfile, run_dir: Path) -> str:
    """A path of the job profile, its placeholders filled and made absolute against the job's
    working folder. Links are resolved on the node that holds the path (scan, the read watch),
    not here: the controller may not see that node's filesystem."""
    filled = expand(path, {"run_dir": str(run_dir)})
    return os.path.normpath(filled if os.path.isabs(filled) else os.path.join(job_folder(job, run_dir), filled))


def _filled(checkpoint: CheckpointSpec, run_dir: Path, job: JobProfile) -> CheckpointSpec:
    return checkpoint.model_copy(update={"dir": job_path(checkpoint.dir, job, run_dir)})


def job_checkpoint(job: JobProfile, run_dir: Path) -> CheckpointSpec | None:
    """The job profile's checkpoints, its folder's placeholders filled for this run."""
    return None if job.checkpoint is None else _filled(job.checkpoint, run_dir, job)


def _checkpoint(params: Any, job: JobProfile, run_dir: Path, fault: str, launched: Launched) -> Any:
    """The drill's own checkpoint, else the profile's; either way its folder filled in."""
    checkpoint = job.checkpoint if params.checkpoint is None else params.checkpoint
    if not isinstance(checkpoint, CheckpointSpec):  # none at all, or a plugin's own kind of value
        return params
    return params.model_copy(update={"checkpoint": _filled(checkpoint, run_dir, job)})


def _tier(params: Any, job: JobProfile, run_dir: Path, fault: str, launched: Launched) -> Any:
    tier = job.tiers.get(params.tier or "")
    if params.folder is None and tier is not None and hasattr(tier, "dir"):
        params = params.model_copy(update={"folder": job_path(tier.dir, job, run_dir)})
    elif isinstance(params.folder, str):
        params = params.model_copy(update={"folder": job_path(params.folder, job, run_dir)})
    if params.folder is None and params.tier is not None:
        raise ConfigError(f"{fault} takes a tier's folder away: the job profile has no folder for "
                          f"tiers.{params.tier} ({', '.join(job.tiers) or 'no tiers'}); name one in the profile "
                          "or the drill's params.folder")
    return params


def _launcher(params: Any, job: JobProfile, run_dir: Path, fault: str, launched: Launched) -> Any:
    if params.launcher is None and job.launcher is not None:
        return params.model_copy(update={"launcher": job.launcher})
    return params


def _replacement(params: Any, job: JobProfile, run_dir: Path, fault: str, launched: Launched) -> Any:
    if params.hook is not None or job.replacement is None:
        return params
    values = {"run_dir": str(run_dir)}
    hook = job.replacement
    return params.model_copy(update={"hook": hook.model_copy(update={
        "shim_dir": expand(hook.shim_dir, values),
        "declare_dead": [expand(a, {**values, "python": sys.executable}) for a in hook.declare_dead or []] or None,
        "revive": [expand(a, {**values, "python": sys.executable}) for a in hook.revive or []] or None})})


def _entry(name: str | None, job: JobProfile, fault: str, launched: Launched, what: str, param: str):
    """The profile's control_plane entry ``name`` (or its only one), its node, and that node's
    launch values (empty before the launch)."""
    names = sorted(job.control_plane)
    if not names:
        raise ConfigError(f"{fault} {what}, and the job profile names none: add control_plane: "
                          "{NAME: {cmdline | port | pidfile, node, address}} to the profile (the rendezvous store's "
                          "host, the lighthouse, the master, an etcd)")
    if name is None and len(names) > 1:
        raise ConfigError(f"{fault}: the job profile names {len(names)} control-plane processes ({', '.join(names)}); "
                          f"say which in the drill's params.{param}")
    name = name or names[0]
    if name not in job.control_plane:
        raise ConfigError(f"{fault}: {name!r} is not in the job profile's control_plane ({', '.join(names)})")
    entry = job.control_plane[name]
    if isinstance(entry.node, int):  # by its place in the launch order: the same on every engine
        nodes = list(launched or {})
        node = nodes[entry.node] if entry.node < len(nodes) else None
        if launched and node is None:
            raise ConfigError(f"{fault}: control_plane {name!r} is on node {entry.node} (counted from 0), and the job "
                              f"was launched on {len(nodes)} node(s)")
    else:
        node = entry.node or (next(iter(launched)) if launched else None)
    return name, entry, node, (launched or {}).get(node or "", {})


def _control_plane(params: Any, job: JobProfile, run_dir: Path, fault: str, launched: Launched) -> Any:
    """One of the profile's control_plane entries (the drill's ``name``, or the only one),
    its placeholders filled with its node's launch values once the job is launched."""
    if params.process is not None:
        return params
    name, entry, node, node_values = _entry(params.name, job, fault, launched,
                                            "takes away a process of the job's control plane", "name")
    values = {"run_dir": str(run_dir), **node_values}
    port = entry.port
    if isinstance(port, str):  # {port}: known once the job is launched
        text = expand(port, values)
        port = int(text) if text.isdigit() else port
    filled = entry.model_copy(update={"pidfile": expand(entry.pidfile, values) if entry.pidfile else None,
                                      "port": port, "node": node if node is not None else entry.node})
    return params.model_copy(update={"name": name, "process": filled, "node": node})


def _control_plane_address(params: Any, job: JobProfile, run_dir: Path, fault: str, launched: Launched) -> Any:
    """A cut of one control-plane process (``params.control_plane``): its ``address`` from the
    profile, filled with its node's launch values, the host resolved to an IPv4 address.
    Before the launch ({port} unknown) the endpoint stays unset; the fault refuses to act
    on an unset one."""
    if getattr(params, "control_plane", None) is None or params.endpoint is not None:
        return params
    name, entry, node, node_values = _entry(params.control_plane, job, fault, launched,
                                            f"cuts a node off from the control plane's {params.control_plane!r}",
                                            "control_plane")
    if entry.address is None:
        raise ConfigError(f"{fault}: control_plane {name!r} of the job profile has no address: add address: "
                          "HOST:PORT (placeholders {head}, {port}, {service_host}) — where the job reaches it")
    text = expand(entry.address, {"run_dir": str(run_dir), **node_values})
    host, _, port = text.rpartition(":")
    if "{" in text or not host:
        return params
    try:
        ip = str(ipaddress.IPv4Address(host))
    except ValueError:
        try:
            ip = socket.gethostbyname(host)
        except OSError as exc:
            raise ConfigError(f"{fault}: control_plane {name!r} is at {text}, and {host!r} does not resolve to an "
                              f"IPv4 address here: {exc}") from None
    return params.model_copy(update={"endpoint": f"{ip}:{port}"})


BINDERS: dict[str, Callable[[Any, JobProfile, Path, str, Launched], Any]] = {
    "checkpoint": _checkpoint, "tier": _tier, "launcher": _launcher, "replacement": _replacement,
    "control_plane": _control_plane, "control_plane_address": _control_plane_address,
}


def job_params(spec: DrillSpec, job: JobProfile, run_dir: Path,
               launched: dict[str, dict[str, str]] | None = None) -> Any:
    """The fault's params: the drill's, then what the fault takes from the job profile (once
    the job is launched, ``launched`` holds each node's placeholder values: a control plane's
    ``{port}``), then what a during_save trigger hands a fault that waits for the save itself."""
    fault = get_fault(spec.fault.type)
    params = fault.Params.model_validate(spec.fault.params)
    for binding in fault.binds:
        params = BINDERS[binding](params, job, run_dir, spec.fault.type, launched)
    if job.launch is None and fault.heals_after_job(params):
        raise ConfigError(f"{spec.fault.type}: its heal waits for the job to stop (restore_after puts the checkpoint "
                          "folder back), and a drill never stops a job it attached to; drop restore_after, or "
                          "let the drill launch the job")
    if fault.needs_checkpoint and getattr(params, "checkpoint", None) is None:
        raise ConfigError(f"{spec.fault.type} needs the job's checkpoints: the job profile has no checkpoint: "
                          "{dir, layout}, and the drill's params name none")
    during = spec.fault.trigger.during_save
    if during is not None and fault.arms_on_save:  # the fault waits for the save on the node itself
        update: dict = {"save": during.save, "delay_s": during.delay, "settle_s": during.settle}
        if during.watch != "signal":
            update["watch"] = during.watch
        if during.files and "point" not in spec.fault.params:
            update["point"] = f"close * #{during.files}"
        params = params.model_copy(update=update)
    return params
