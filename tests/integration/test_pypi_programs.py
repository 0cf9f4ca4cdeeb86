"""Training programs nobody here wrote, installed from PyPI as their users install them and run
through their own command line, drilled through the installed ``drill`` as users run it (by
absolute path, the virtual environment off PATH, from a project folder holding the README's
``drill.yaml`` with the job's profile added, the job launched from that folder with relative
paths). drillbit learns about each only from its profile and its own lines (a preset).

- LitGPT (``litgpt finetune_full``, litgpt 0.5.13) under torchrun with ``--resume auto``: one
  rank (on CPU LitGPT runs more than one device only through FSDP, which it refuses off GPU).
  kill-rank PASSes: torchrun restarts it and it resumes from its newest ``step-*``.
  corrupt-checkpoint FAILs: ``--resume auto`` loads the newest ``step-*`` whatever is in it, and
  it loaded the damaged one.
- TRL (``trl sft``, trl 1.16.0, transformers 5.24.0) through accelerate's torchrun launcher, two
  CPU processes: both FAIL, rightly — its restart trains from step 0 (no "resume if there is a
  checkpoint" in its CLI), or hangs in init_process_group on the restarted store.
- torchtitan (0.3.0, the issue's other example) cannot run here: it imports triton
  unconditionally (torchtitan/distributed/minimal_async_ep/kernels.py) and, with triton
  installed, calls ``torch.cuda.set_device`` in the trainer ("module 'torch._C' has no attribute
  '_cuda_setDevice'" on a CPU build).

Each program lives in a virtual environment of its own (torch 2.13.0, CPU, then the program's
pinned requirements, ``programs/<name>.txt``), made once per machine under a cache folder."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli
from tests.integration.test_users_path import REPO, users_env

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).parent / "programs"
TORCH = "torch==2.13.0"  # first, on its own: the CPU build this machine has (an open range pulls CUDA)
CACHE = Path(os.environ.get("DRILLBIT_TEST_CACHE") or Path.home() / ".cache" / "drillbit-tests")


def program_venv(name: str) -> Path:
    """The virtual environment holding ``name`` as ``programs/<name>.txt`` pins it; made once
    (keyed by the pins), under a lock so that two test workers never make it at once."""
    pins = (PROGRAMS / f"{name}.txt").read_bytes()
    venv = CACHE / f"{name}-{hashlib.sha256(pins + TORCH.encode()).hexdigest()[:12]}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shared = venv / "shared-torch" / "torch"
        if (venv / ".complete").exists() and (shared.exists() or not shared.is_symlink()):
            return venv  # (a shared torch whose suite environment is gone, a removed clone's, is made again)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
        if not share_torch(venv):
            _installed(pip + [TORCH])
        pins = ["-r", str(PROGRAMS / f"{name}.txt")]
        # the pins are pip's whole resolution (torch aside), so uv installs exactly them, without
        # resolving again (pip took about 2 minutes a program here, uv seconds); pip check then
        # shows that nothing a program needs was left out of its pins
        _installed([uv, "pip", "install", "-q", "--python", python, "--no-deps", "--compile-bytecode", *pins]
                   if uv else pip + pins)
        check = subprocess.run([python, "-m", "pip", "check", "--disable-pip-version-check"],
                               capture_output=True, text=True, timeout=300)
        # torch's own wants (setuptools) are the shared torch's business, as under pip install
        broken = [line for line in check.stdout.splitlines() if check.returncode and not line.startswith("torch ")]
        assert not broken, f"{name}'s pins leave out what it needs: {broken}"
        (venv / ".complete").write_text("")
    return venv


def _installed(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stdout[-2000:]}{done.stderr[-3000:]}"


def share_torch(venv: Path) -> bool:
    """The test suite's own torch 2.13.0 (CPU), seen by the program's environment through a
    folder of links to it and nothing else — torch installed once, not once per program (the
    same build either way); the program's other packages are its own. False where this
    interpreter has no torch 2.13.0 to share."""
    import torch

    if not torch.__version__.startswith("2.13.0"):
        return False
    site = Path(torch.__file__).parent.parent
    shared = venv / "shared-torch"
    shared.mkdir()
    for entry in site.iterdir():
        if entry.name in ("torch", "functorch", "torchgen") or entry.name.startswith("torch-2.13.0"):
            (shared / entry.name).symlink_to(entry)
    [own] = (venv / "lib").glob("python3*/site-packages")
    (own / "zz-shared-torch.pth").write_text(f"{shared}\n")
    return True


def project_with(tmp_path: Path, jobs: dict) -> Path:
    """A user's project folder: the README's drill.yaml with the job's profile added."""
    folder = tmp_path / "project"
    folder.mkdir()
    text = (REPO / "drill.yaml").read_text()
    assert "reports_dir: reports\n" in text and "\njobs:\n" in text
    block = "".join(f"  {name}: {json.dumps(profile)}\n" for name, profile in jobs.items())
    (folder / "drill.yaml").write_text(text.replace("\njobs:\n", "\njobs:\n" + block, 1))
    (folder / "drills").mkdir()
    return folder


def drill(project: Path, tmp_path: Path, spec: str, job: str) -> tuple[int, dict, str]:
    done = drill_cli("run", f"drills/{spec}.yaml", "--job", job, "--cluster", "local-process", "--json",
                     cwd=project, env=users_env(tmp_path), timeout=900)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {}
    return done.returncode, result, done.stdout[-4000:] + done.stderr[-4000:]


# --- LitGPT -------------------------------------------------------------------------------------------
LITGPT_FLAGS = [  # as LitGPT's docs give them, sized for a CPU: one device, 32-bit, a tiny batch
    "--out_dir", "out", "--precision", "32-true", "--resume", "auto", "--logger_name", "csv",
    "--data", "JSON", "--data.json_path", "train.json", "--data.val_split_fraction", "0.05",
    "--data.num_workers", "0",  # its default of 4 loader processes on a 2-core machine
    "--train.save_interval", "10", "--train.global_batch_size", "16", "--train.micro_batch_size", "16",
    "--train.max_steps", "100000", "--train.lr_warmup_steps", "2", "--train.max_seq_length", "64",
    "--eval.interval", "100000", "--eval.initial_validation", "false", "--eval.final_validation", "false"]

DRILL = """name: {job}-{fault}
class: {cls}
summary: {summary}
job: {job}
fault:
  type: {fault}
  targets: {targets}
  params: {params}
  trigger: {{at_step: 25}}   # saves every 10 steps: step 20 is the newest
steady: {{warmup_steps: 5}}
observe: {{until_steps_after_recovery: 10, window: 60s}}
slo:
  detect_within: 60s
  first_step_within: 60s
  max_lost_steps: 20
  limits: {{restarts: {{max: 1}}}}
abort: {{max_duration: 6m}}
blast_radius: {{max_share: 1.0}}
"""
FAULTS = {"kill-rank": ("fail-stop", "{signal: SIGKILL}"),
          "corrupt-checkpoint": ("recovery-path", "{mode: flip-bytes, nth_newest: 0, then_kill: true}")}


def write_drills(project: Path, job: str, targets: str, summary: str) -> None:
    """The catalogue's kill-rank and corrupt-checkpoint drills, aimed as the job needs."""
    for fault, (cls, params) in FAULTS.items():
        (project / "drills" / f"{job}-{fault}.yaml").write_text(DRILL.format(
            job=job, fault=fault, cls=cls, params=params, targets=targets, summary=summary))


def program_project(tmp_path: Path, venv: Path, job: str, profile: dict, maker: str, targets: str,
                    summary: str) -> Path:
    """The project folder of one program: its profile (launched from the project folder, its
    output in the run folder's job.out), what its users have before they train (``maker``,
    run with the program's own interpreter) and the two drills."""
    # one thread a process, as torchrun sets it for more than one process a node: on two cores
    # shared with the suite's other jobs, torch's OpenMP threads spin waiting for each other
    # (LitGPT's one rank took 1.2-2.4 s a step beside them, against 50 ms alone)
    profile = {**profile, "launch": {**profile["launch"], "cwd": ".", "env": {"LOGLEVEL": "INFO", "OMP_NUM_THREADS": "1"}},
               "logs": ["{run_dir}/job.out"]}
    project = project_with(tmp_path, {job: profile})
    subprocess.run([str(venv / "bin" / "python"), str(PROGRAMS / maker), str(project)], check=True,
                   capture_output=True, timeout=300)
    write_drills(project, job, targets, summary)
    return project


@pytest.fixture(scope="module")
def litgpt() -> Path:
    return program_venv("litgpt")


def litgpt_project(tmp_path: Path, venv: Path) -> Path:
    bin_ = venv / "bin"
    return program_project(tmp_path, venv, "litgpt", {
        "description": "litgpt finetune_full under torchrun, as installed from PyPI",
        "presets": ["torchrun", "litgpt"],
        "launch": {"command": [str(bin_ / "python"), "-m", "torch.distributed.run", "--nproc-per-node", "1",
                               "--max-restarts", "2",
                               "--monitor-interval", "0.5", str(bin_ / "litgpt"), "finetune_full", "base",
                               *LITGPT_FLAGS]},
        "ranks": {"cmdline": r"litgpt finetune_full", "exclude_cmdline": r"torch\.distributed\.run"},
        "checkpoint": {"dir": "out", "layout": "custom", "glob": "step-*", "step_regex": r"step-(\d+)",
                       "data": "lit_model.pth"}},
        "make_litgpt.py", "{ranks: [0]}",  # its only rank: the whole job (blast_radius 1.0)
        "LitGPT's only rank dies; torchrun restarts it, and --resume auto loads the newest step-*")


def test_litgpt_kill_rank_passes_as_torchrun_restarts_it_and_it_resumes(tmp_path, litgpt):
    project = litgpt_project(tmp_path, litgpt)
    code, result, said = drill(project, tmp_path, "litgpt-kill-rank", "litgpt")
    assert code == 0, said
    m = result["measurements"]
    assert m["restored_step"] == 20, m  # 'Resuming training from out/step-000020/lit_model.pth'
    assert (project / "out" / "step-000020" / "lit_model.pth").is_file()


def test_litgpt_corrupt_checkpoint_fails_as_resume_auto_loads_the_damaged_step(tmp_path, litgpt):
    project = litgpt_project(tmp_path, litgpt)
    code, result, said = drill(project, tmp_path, "litgpt-corrupt-checkpoint", "litgpt")
    assert code == 1, said
    slo = next(s for s in result["slos"] if s["name"] == "restore_skipped_corrupted")
    assert slo["status"] == "fail", slo
    damage = result["measurements"]["damaged_restore"]
    assert damage["checkpoint"] == str(project.resolve() / "out" / "step-000020"), damage
    [heal] = result["fault"]["heals"]
    assert heal["verified"], heal


# --- TRL ------------------------------------------------------------------------------------------------
TRL_FLAGS = [  # `trl sft` as its docs give it; --multi_gpu is accelerate's torchrun launcher (on CPU: gloo)
    "--multi_gpu", "--num_processes", "2", "--max_restarts", "2", "--monitor_interval", "0.5",
    "--model_name_or_path", "base", "--dataset_name", "data", "--output_dir", "out", "--use_cpu", "true",
    "--max_steps", "100000", "--save_steps", "10", "--logging_steps", "1", "--log_level", "info",
    "--per_device_train_batch_size", "16", "--max_length", "64", "--report_to", "none"]


@pytest.fixture(scope="module")
def trl() -> Path:
    return program_venv("trl")


def trl_project(tmp_path: Path, venv: Path) -> Path:
    return program_project(tmp_path, venv, "trl", {
        "description": "trl sft (accelerate launch --multi_gpu, two CPU processes), as installed from PyPI",
        "presets": ["torchrun", "hf-trainer"],
        "launch": {"command": [str(venv / "bin" / "trl"), "sft", *TRL_FLAGS]},
        "ranks": {"cmdline": r"trl/scripts/sft\.py"},
        "checkpoint": {"dir": "out", "layout": "custom", "glob": "checkpoint-*", "step_regex": r"checkpoint-(\d+)",
                       "data": "model.safetensors"}},
        "make_trl.py", "{count: 1, select: random, exclude_ranks: [0]}",
        "one of trl sft's two ranks dies; accelerate's torchrun launcher restarts both")


# the extended tier's: LitGPT is the CI tier's program from PyPI (its own virtual environment, a
# pass and a fail); TRL's environment and two Trainer ranks are some 70 CPU-s
@pytest.mark.extended
@pytest.mark.parametrize("fault", ["kill-rank"])  # corrupt-checkpoint ends the same way (LitGPT drills it)
def test_trl_sft_fails_as_its_restart_starts_over(tmp_path, trl, fault):
    """`trl sft` has no way to say "resume from the newest checkpoint if there is one": its
    --resume_from_checkpoint takes one path, and the restart runs the same command line. The
    restart trains from step 0 — every step since the start is lost — or, when accelerate's
    torchrun restart meets its stale store, never steps at all: stuck in init_process_group, or
    crashing until its restart budget is spent. Each is a FAIL, and the reasons say which (the
    stuck frame from the ranks' stacks, the job's own error line)."""
    project = trl_project(tmp_path, trl)
    code, result, said = drill(project, tmp_path, f"trl-{fault}", "trl")
    assert code == 1, said
    reasons = " ".join(result["reasons"])
    # which of its endings came is a race; each is a FAIL that says what happened
    assert any(said in reasons for said in ("restored step 0", "where the job was stuck", "no restart ever produced a step")), \
        result["reasons"]
    if fault == "corrupt-checkpoint":
        [heal] = result["fault"]["heals"]
        assert heal["verified"], heal
