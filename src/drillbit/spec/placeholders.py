"""Placeholders in job profiles: ``{run_dir}``, ``{python}``, ``{node}``, ``{node_rank}``,
``{nnodes}``, ``{head}``, ``{port}``, ``{ray_address}``. One way to fill them, used for
launch commands, log paths, checkpoint folders, pid files and heartbeat files alike; and what
a launch's per-node placeholders need (``per_node_findings``)."""
from __future__ import annotations

import os
import re

PLACEHOLDERS = ("run_dir", "python", "node", "node_rank", "nnodes", "head", "port", "ray_address", "service_host")


def expand(text: str, values: dict[str, str]) -> str:
    """Fill the placeholders ``values`` knows; leave any other ``{name}`` as it is."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), text)


def unknown(text: str) -> list[str]:
    """Placeholders in ``text`` that drillbit does not fill (a typo in a profile)."""
    return [name for name in re.findall(r"\{(\w+)\}", text) if name not in PLACEHOLDERS]


Finding = tuple[tuple[str | int, ...], str]  # (where in the job profile, what it says)


def per_node_findings(command: list[str], env: dict[str, str], per_node: bool) -> tuple[list[Finding], list[Finding]]:
    """A launch's per-node placeholders without ``per_node``, as (problems, warnings).

    Without ``per_node`` every engine starts one launcher, on the first node (Slurm: the batch
    script, on the allocation's first node), with that node's values. ``{node_rank}`` is then 0,
    on every engine: a problem. torchrun's ``--nnodes {nnodes}`` makes that one torchrun wait in
    its rendezvous for torchruns that never start: a problem. Any other ``{nnodes}`` is the
    cluster's node count told to one launcher, right for one that reaches the other nodes itself
    (a Ray Train driver sizing its workers, srun or mpirun in a Slurm batch script): a warning
    that says what will happen. ``{node}`` names the node the launcher runs on, as true for one
    launcher as for one per node: nothing."""
    if per_node:
        return [], []
    problems: list[Finding] = []
    warnings: list[Finding] = []
    torchrun = any(os.path.basename(a) == "torchrun" or a == "torch.distributed.run" for a in command)
    texts: list[tuple[tuple[str | int, ...], str, bool]] = [
        (("launch", "command", i), a, torchrun and (a.startswith("--nnodes=") or command[i - 1:i] == ["--nnodes"]))
        for i, a in enumerate(command)]
    texts += [(("launch", "env", k), v, False) for k, v in env.items()]
    for loc, text, nnodes_flag in texts:
        if "{node_rank}" in text:
            problems.append((loc, "{node_rank} without launch.per_node: true: one launcher starts, on the first node "
                                  "only, and {node_rank} is 0 there; set per_node: true (one launcher per node, each "
                                  "with its own {node_rank}; on one node it changes nothing)"))
        elif "{nnodes}" in text and nnodes_flag:
            problems.append((loc, "torchrun --nnodes {nnodes} without launch.per_node: true: one torchrun starts, on "
                                  "the first node only, and its rendezvous waits for the other nodes' torchruns, "
                                  "which never start; set per_node: true (one torchrun per node)"))
        elif "{nnodes}" in text:
            warnings.append((loc, "{nnodes} without launch.per_node: true: one launcher starts, on the first node "
                                  "only, and is told the cluster's node count; right for a launcher that reaches the "
                                  "other nodes itself (a Ray Train driver, srun or mpirun in a Slurm batch script), "
                                  "else set per_node: true"))
    return problems, warnings
