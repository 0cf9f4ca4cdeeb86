"""Checkpoint layouts: where a job's checkpoints are, which step each holds, whether it is
complete, and which of its files are data, completion marker and metadata.

A job profile names its layout (``checkpoint: {dir, layout}``); corrupt-checkpoint and
restore-hang pick their file through it, and ``drill probe`` lists what it finds. Built in:

=============  =====================================================================
reference      ``step_N/`` with shards, ``COMPLETE`` and ``meta.json`` (drillbit's fixture)
dcp            torch.distributed.checkpoint folders (torchtitan: ``step-N/``): ``*.distcp``
               data; ``.metadata`` is written last, so it is both marker and metadata
hf             Hugging Face Trainer ``checkpoint-N/``: ``model.safetensors`` (or
               ``pytorch_model.bin``) first, then optimizer and scheduler;
               ``trainer_state.json`` is the metadata; no marker
lightning      ``*.ckpt`` files; the step from ``step=N`` in the name; ``last.ckpt`` has
               none, and is ordered by modification time with the rest
megatron       ``iter_NNNNNNN/`` (``mp_rank_*/model_optim_rng.pt`` or a dist-ckpt folder);
               the tracker ``latest_checkpointed_iteration.txt`` in ``dir``
deepspeed      ``global_stepN/`` with ``*_model_states.pt`` first; the tracker ``latest``
orbax          ``N/`` folders; ``_CHECKPOINT_METADATA`` inside marks it complete
glob           plain files or folders matching ``glob``, the step from ``step_regex``
file           one file (or a few fixed names, ``files``) rewritten in place on every save:
               ``ckpt.pt``, ``last.pt``, ``checkpoint.pth``; no step in the name — the step is
               the one the job's save and restore lines name
custom         ``glob`` + ``step_regex``, with an optional ``marker`` and ``metadata``
               (names inside a checkpoint folder) and ``data`` (a glob of its data files)
=============  =====================================================================
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, Tag, model_validator

from drillbit.core.paths import entered_path
from drillbit.spec.models import Strict, compile_regex
from drillbit.spec.placeholders import expand

LayoutName = Literal["reference", "dcp", "hf", "lightning", "megatron", "deepspeed", "orbax", "glob", "custom",
                     "file"]


@dataclass(frozen=True)
class Rules:
    glob: str                         # entries under dir (folders or files)
    step_regex: str                   # group 1 (or group "step") is the step
    marker: str | None = None         # inside the folder: present once the save is complete
    metadata: str | None = None       # inside the folder: the file a loader reads first
    tracker: str | None = None        # in dir: names the newest complete checkpoint
    data: tuple[str, ...] = ("*",)    # globs of data files, in order of preference
    by_mtime: bool = False            # entries without a step in the name (last.ckpt) sort by time


BUILTIN: dict[str, Rules] = {
    "reference": Rules("step_*", r"step_(\d+)", marker="COMPLETE", metadata="meta.json"),
    "dcp": Rules("*", r"(\d+)$", marker=".metadata", metadata=".metadata", data=("*.distcp",)),
    "hf": Rules("checkpoint-*", r"checkpoint-(\d+)$", metadata="trainer_state.json",
                data=("model.safetensors", "model-*.safetensors", "pytorch_model*.bin", "adapter_model.safetensors",
                      "optimizer.pt", "*")),
    "lightning": Rules("*.ckpt", r"step=(\d+)", by_mtime=True),
    "megatron": Rules("iter_*", r"iter_(\d+)$", tracker="latest_checkpointed_iteration.txt",
                      data=("**/model_optim_rng.pt", "**/*.distcp", "**/*.pt", "**/*")),
    "deepspeed": Rules("global_step*", r"global_step(\d+)$", tracker="latest",
                       data=("*model_states.pt", "*optim_states.pt", "**/*")),
    # an item folder per step (default/, state/) holding OCDBT data files: the merged tree's own
    # d/ is what a restore reads (Orbax 0.12.8 merges each process's ocdbt.process_N/d/ into it
    # at the end of a save; those are then never read again)
    "orbax": Rules("*", r"^(\d+)$", marker="_CHECKPOINT_METADATA", metadata="_CHECKPOINT_METADATA",
                   data=("*/d/*", "**/d/*", "**/*")),
}
# names never counted as data: markers, metadata and the tracker's own files
_NOT_DATA = {"COMPLETE", "meta.json", "MANIFEST.json", ".metadata", "_CHECKPOINT_METADATA", "trainer_state.json",
             "commit_success.txt"}


def stays_inside(name: str) -> bool:
    """A name (or glob) relative to its folder that cannot leave it: not absolute, no ``..``,
    not empty. (A symlink inside is caught where the file is opened: faults/ckptfile.py.)"""
    parts = name.replace("\\", "/").split("/")
    return bool(name) and not name.startswith(("/", "~")) and ".." not in parts and "\x00" not in name


class CheckpointSpec(Strict):
    """Where a job's checkpoints are and how they are laid out (``checkpoint:`` in a job
    profile; also a param of corrupt-checkpoint and restore-hang)."""

    dir: str = Field(description="the folder the job saves checkpoints in (placeholders allowed)")
    layout: LayoutName = Field("reference", description="a built-in layout, glob, or custom")
    glob: str | None = Field(None, description="glob/custom: the checkpoints under dir (files or folders)")
    step_regex: str | None = Field(None, description="glob/custom: regex on the name; group 1 is the step")
    marker: str | None = Field(None, description="custom: a file inside a checkpoint folder that marks it complete")
    metadata: str | None = Field(None, description="custom: the metadata file inside a checkpoint folder")
    data: str | None = Field(None, description="custom: glob of the data files inside a checkpoint folder")
    files: list[str] | None = Field(None, description="file: the fixed names under dir the job rewrites in place "
                                                      "(ckpt.pt); newest first by modification time")

    @model_validator(mode="after")
    def _complete(self) -> "CheckpointSpec":
        if self.layout == "file":
            if not self.files:
                raise ValueError("layout file needs files: the names the job rewrites in place, e.g. [ckpt.pt]")
            bad = [f for f in self.files if not f or "/" in f or f in (".", "..") or any(c in f for c in "*?[")]
            if bad:
                raise ValueError(f"files are plain names inside dir (no folders, no wildcards): {bad}")
            if any(getattr(self, k) is not None for k in ("glob", "step_regex", "marker", "metadata", "data")):
                raise ValueError("layout file takes files only (the step comes from the job's save and restore lines)")
            return self
        if self.files is not None:
            raise ValueError(f"files is for layout file, not {self.layout}")
        leaving = [f"{k}: {v!r}" for k in ("glob", "marker", "metadata", "data")
                   if (v := getattr(self, k)) is not None and not stays_inside(v)]
        if leaving:
            raise ValueError(f"names inside the checkpoint folder must stay inside it (relative, no '..'): "
                             f"{', '.join(leaving)}")
        if self.layout in ("glob", "custom"):
            missing = [k for k in ("glob", "step_regex") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"layout {self.layout} needs {' and '.join(missing)}")
        elif any(getattr(self, k) is not None for k in ("glob", "step_regex", "marker", "metadata", "data")):
            raise ValueError(f"glob, step_regex, marker, metadata and data are for layout glob or custom, "
                             f"not {self.layout}")
        if self.layout == "glob" and (self.marker or self.metadata):
            raise ValueError("layout glob has no marker or metadata; use layout custom")
        if self.step_regex is not None:
            rx = compile_regex(self.step_regex, "step_regex")
            if rx.groups < 1:
                raise ValueError("step_regex needs a group for the step, e.g. 'step_(\\d+)'")
        return self

    def rules(self) -> Rules:
        if self.layout == "file":
            return Rules(glob="*", step_regex=r"(?!)", by_mtime=True)
        if self.layout in BUILTIN:
            return BUILTIN[self.layout]
        return Rules(glob=self.glob or "*", step_regex=self.step_regex or r"(\d+)", marker=self.marker,
                     metadata=self.metadata, data=(self.data,) if self.data else ("*",))


class SavedTier(Strict):
    """A checkpoint tier with no folder to read (DLRover's flash checkpoints in its agent's
    shared memory): the newest step the job said it saved there — its save signal's ``tier``
    group — is the step the tier holds. ``lost_with``: what takes it away (the node: a process
    that dies leaves it; a fault that takes the node, or the process holding it, does not)."""

    known_from: Literal["saves"] = Field(description="saves: the job's ckpt.save events that name this tier")
    lost_with: Literal["node", "process"] = Field("node", description="node: it outlives a killed process "
                                                                      "(shared memory held by an agent)")


def _tier_kind(value: object) -> str:
    known = value.get("known_from") if isinstance(value, dict) else getattr(value, "known_from", None)
    return "<saves>" if known is not None else "<folder>"


# a job profile's tier: a folder of copies, or one known from the job's saves ({known_from: saves})
# (the tags, in <>, are left out of the places errors name)
Tier = Annotated[Union[Annotated[CheckpointSpec, Tag("<folder>")], Annotated[SavedTier, Tag("<saves>")]],
                 Discriminator(_tier_kind)]


@dataclass
class Checkpoint:
    path: Path
    step: int | None
    complete: bool | None              # None: the layout has no way to tell
    data: list[Path] = field(default_factory=list)
    marker: Path | None = None         # where the marker is (or would be)
    metadata: Path | None = None
    mtime: float = 0.0

    @property
    def name(self) -> str:
        return self.path.name

    def as_dict(self) -> dict:
        return {"path": str(self.path), "step": self.step, "complete": self.complete,
                "data": [str(p) for p in self.data], "marker": str(self.marker) if self.marker else None,
                "metadata": str(self.metadata) if self.metadata else None}


def _step(rx: re.Pattern, name: str) -> int | None:
    m = rx.search(name)
    if not m:
        return None
    text = m.groupdict().get("step") or m.group(1)
    return int(text) if text and text.isdigit() else None


def _data_files(folder: Path, rules: Rules) -> list[Path]:
    found: list[Path] = []
    skip = {rules.marker, rules.metadata, *_NOT_DATA}
    for pattern in rules.data:
        for p in sorted(folder.glob(pattern)):
            if p.is_file() and not p.is_symlink() and p.name not in skip and not p.name.startswith(".") \
                    and p not in found:
                found.append(p)
    return found


def scan(spec: CheckpointSpec) -> list[Checkpoint]:
    """The checkpoints under ``spec.dir``, newest first (by step; by modification time where
    the layout's names carry none). A missing folder has none. The paths are absolute and
    resolved (:func:`drillbit.core.paths.entered`): a checkpoint is named as the kernel names the
    files a process reads."""
    root = entered_path(spec.dir)
    if not root.is_dir():
        return []
    rules = spec.rules()
    rx = re.compile(rules.step_regex)
    out: list[Checkpoint] = []
    for entry in root.iterdir():
        if spec.files is not None and entry.name not in spec.files:
            continue
        if not fnmatch.fnmatch(entry.name, rules.glob) or entry.name.startswith("."):
            continue
        step = _step(rx, entry.name)
        if step is None and not rules.by_mtime:
            continue
        try:
            mtime = entry.stat().st_mtime
        except FileNotFoundError:
            continue  # pruned while we looked
        if entry.is_dir():
            marker = entry / rules.marker if rules.marker else None
            metadata = entry / rules.metadata if rules.metadata else None
            ckpt = Checkpoint(entry, step, marker.exists() if marker else None, _data_files(entry, rules),
                              marker, metadata if metadata and metadata.exists() else None, mtime)
        elif entry.is_file():
            ckpt = Checkpoint(entry, step, None, [entry], None, None, mtime)
        else:
            continue
        out.append(ckpt)
    if rules.by_mtime:
        out.sort(key=lambda c: (c.mtime, c.step or -1), reverse=True)
    else:
        out.sort(key=lambda c: (c.step or 0, c.mtime), reverse=True)
    if rules.tracker:
        tracker = root / rules.tracker
        for c in out[:1]:
            c.metadata = c.metadata or (tracker if tracker.is_file() else None)
            c.complete = _tracked(tracker, c)
    return out


def _tracked(tracker: Path, ckpt: Checkpoint) -> bool | None:
    """A tracker file (Megatron's ``latest_checkpointed_iteration.txt``, DeepSpeed's
    ``latest``) names the newest complete checkpoint: by its step, or its folder name."""
    try:
        text = tracker.read_text().strip()
    except OSError:
        return None if not tracker.parent.is_dir() else False
    return text == ckpt.name or (text.isdigit() and ckpt.step is not None and int(text) == ckpt.step)


def where(spec: CheckpointSpec) -> str:
    return f"{spec.dir} (layout {spec.layout})"


# what a checkpoint file or folder is usually called: a folder holding these beside nothing the
# layout takes is described wrong (other files — a config.json, a log — say nothing)
_CKPT_LIKE = re.compile(r"\.(pt|pth|ckpt|bin|safetensors|distcp|npy|npz|pkl|pickle|h5|msgpack)$|ckpt|checkpoint|"
                        r"^(step|iter|global_step|epoch)[-_]?\d+", re.IGNORECASE)


def unmatched(spec: CheckpointSpec) -> list[str]:
    """Names in the checkpoint folder that look like checkpoints (by their names) while the
    layout takes none of the folder's entries: a description that does not fit the job. Empty
    otherwise — a folder with only other files has not been saved to yet, and a ``file``
    layout names its files outright."""
    if spec.layout == "file":
        return []
    root = Path(spec.dir)
    try:
        names = sorted(e.name for e in root.iterdir() if not e.name.startswith(".") and _CKPT_LIKE.search(e.name))
    except OSError:
        return []
    return names if names and not scan(spec) else []



def tier_steps(tiers: dict[str, CheckpointSpec | SavedTier],
               values: dict[str, str]) -> dict[str, dict[str, int | None]]:
    """Each tier's copies (a dir glob's matches) and the newest complete step each holds:
    ``{tier: {path: step}}``; a copy with no complete checkpoint has None. A tier known from
    the job's saves has no copies here (``{}``): the measurement reads its save events."""
    import glob as globlib

    out: dict[str, dict[str, int | None]] = {}
    for name, spec in tiers.items():
        if isinstance(spec, SavedTier):
            out[name] = {}
            continue
        pattern = expand(spec.dir, {"rank": "*", "node": "*", **values})  # every rank's, every node's copy
        copies = sorted(globlib.glob(pattern)) if globlib.has_magic(pattern) else [pattern]
        out[name] = {}
        for copy in copies:
            found = [c.step for c in scan(spec.model_copy(update={"dir": copy}))
                     if c.step is not None and c.complete is not False]
            out[name][copy] = max(found) if found else None
    return out
