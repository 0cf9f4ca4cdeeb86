"""Where a hang is stuck, from hand-built dumps (the shape py-spy's --json gives), and real py-spy
dumps of processes these tests start: one waiting, and two ranks of a small job, one of them
stopped (SIGSTOP) as stall-nccl stops it."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from drillbit.core.pystacks import MAX_GROUPS, Frame, Hit, RankStack, dump, py_spy, shared_frames, where_stuck
from drillbit.core.proc import ProcRef


def stack(rank: int, *names: str, ok: bool = True) -> RankStack:
    """Frames given outermost first, stored innermost first as py-spy does."""
    frames = [Frame(name=n, file=f"/x/{n}.py", line=i + 1) for i, n in enumerate(names)]
    return RankStack(pid=100 + rank, rank=rank, ok=ok, threads={"MainThread": list(reversed(frames))} if ok else {},
                     error="" if ok else "py-spy cannot attach: Permission denied")


STOPPED = Hit(verb="stopped", procs=[("", 101)])  # rank 1 (pid 101), as the fault's plan named it
TRAIN = ("<module>", "main", "train", "_inner_training_loop", "training_step")


def test_ranks_all_in_one_frame_are_stuck_there_together():
    stacks = [stack(r, "<module>", "main", "init_process_group", "rendezvous", "_create_c10d_store") for r in range(3)]
    assert [f.name for f in shared_frames(stacks)] == ["init_process_group", "rendezvous", "_create_c10d_store"]
    assert where_stuck(stacks, 1) == ("ranks 0–2 of attempt 1 stuck in … → init_process_group → rendezvous → "
                                      "_create_c10d_store (_create_c10d_store.py:5)")


def test_the_shared_path_is_quoted_once_and_each_rank_keeps_its_own_innermost_frame():
    # the Trainer's stall: rank 0 waits in backward's all-reduce, rank 1 was stopped inside the model's forward
    stacks = [stack(0, *TRAIN, "backward", "_engine_run_backward"),
              stack(1, *TRAIN, "compute_loss", "__call__", "_call_impl", "forward")]
    text = where_stuck(stacks, 0)
    assert text == ("ranks 0–1 of the first attempt share … → train → _inner_training_loop → training_step; "
                    "rank 0 in backward → _engine_run_backward (_engine_run_backward.py:7); "
                    "rank 1 in compute_loss → … → forward (forward.py:9)")
    assert "ranks 0–1 of the first attempt stuck in" not in text  # no rank is placed on another's frame


def test_the_rank_the_fault_stopped_is_named_as_such():
    stacks = [stack(0, *TRAIN, "backward", "_engine_run_backward"),
              stack(1, *TRAIN, "compute_loss", "__call__", "_call_impl", "forward")]
    text = where_stuck(stacks, 0, STOPPED)
    assert "; rank 1, the one the fault stopped, in compute_loss → … → forward (forward.py:9)" in text
    assert "rank 0 in backward" in text and "rank 0, the one" not in text
    # the fault's own verb; a target in one frame with others is named among them
    together = [stack(r, "<module>", "main", "loop", "all_reduce") for r in range(4)]
    assert where_stuck(together, 2, Hit(verb="cut off", procs=[("", 101)])) == (
        "ranks 0–3 of attempt 2 (rank 1 the one the fault cut off) stuck in main → loop → all_reduce (all_reduce.py:4)")
    # alone, the stopped rank's whole path is its own
    assert where_stuck([stack(1, "<module>", "main", "fwd")], 1, STOPPED) == (
        "rank 1 of attempt 1, the one the fault stopped, stuck in main → fwd (fwd.py:3)")


def test_the_targets_are_the_planned_processes_themselves_not_a_pid_reused_since():
    live = [ProcRef(pid=101, start_time=5.0, rank=1, node="n1", boot_start=2.0),
            ProcRef(pid=102, start_time=6.0, rank=2, node="n1", boot_start=3.0)]
    planned = [ProcRef(pid=101, start_time=5.0, rank=1, node="n1", boot_start=2.0),
               ProcRef(pid=102, start_time=1.0, rank=2, node="n1", boot_start=0.5)]  # 102 died; its pid was reused
    hit = Hit.among(live, planned, "stopped")
    assert hit.procs == [("n1", 101)]
    assert hit.of(RankStack(node="n1", pid=101, ok=True)) and not hit.of(RankStack(node="n2", pid=101, ok=True))


def test_a_rank_that_could_not_be_read_is_said_to_be_unread_with_why():
    stacks = [stack(0, "<module>", "main", "restore", "read_shard"), stack(1, "<module>", "main", "restore", "barrier"),
              stack(2, ok=False)]
    text = where_stuck(stacks, 0)
    assert text == ("ranks 0–1 of the first attempt share main → restore; rank 0 in read_shard (read_shard.py:4); "
                    "rank 1 in barrier (barrier.py:4); rank 2 not read (py-spy cannot attach: Permission denied)")
    # the stopped rank unread is still named, and nothing is said of where it was
    stacks[1] = stack(1, ok=False)
    assert where_stuck(stacks, 0, STOPPED) == (
        "rank 0 of the first attempt stuck in main → restore → read_shard (read_shard.py:4); "
        "ranks 1–2 (rank 1 the one the fault stopped) not read (py-spy cannot attach: Permission denied)")


def test_no_readable_stack_says_why_and_concludes_nothing():
    assert where_stuck([stack(0, ok=False)], 1) == (
        "the ranks' stacks could not be read: rank 0 not read (py-spy cannot attach: Permission denied)")
    assert where_stuck([stack(0, ok=False), stack(1, ok=False)], 1, STOPPED) == (
        "the ranks' stacks could not be read: ranks 0–1 (rank 1 the one the fault stopped) not read "
        "(py-spy cannot attach: Permission denied)")
    assert where_stuck([], 1).startswith("no live rank")
    empty = RankStack(pid=7, rank=0, ok=True, threads={"MainThread": []})
    assert where_stuck([empty], 1) == "the ranks' stacks could not be read: rank 0 not read (py-spy found no Python frame)"


def test_ranks_that_share_no_frame_are_each_placed_on_their_own():
    stacks = [stack(0, "<module>", "a"), stack(1, "b", "c")]
    assert where_stuck(stacks, 2, STOPPED) == ("ranks 0–1 of attempt 2 share no frame past the entry point; "
                                              "rank 0 in a (a.py:2); rank 1, the one the fault stopped, in b → c (c.py:2)")


def test_many_ranks_are_grouped_by_frame_and_the_listing_is_capped_never_dropping_the_stopped_rank():
    stacks = [stack(r, "<module>", "main", "step", f"f{r % 7}") for r in range(64)]  # 7 frames, 64 ranks
    text = where_stuck(stacks, 1, Hit(verb="stopped", procs=[("", 100 + 33)]))  # rank 33 is in f5
    assert text.startswith("ranks 0–63 of attempt 1 share main → step; ranks 0, 7, 14, 21, 28, … (10 in all) in f0 (f0.py:4)")
    assert "(rank 33 the one the fault stopped) in f5 (f5.py:4)" in text
    listed = [f"f{i} (" for i in range(7) if f"f{i} (" in text]
    assert len(listed) == MAX_GROUPS and "f5 (" in listed and "f6 (" not in listed
    shown = 10 + 9 + 9 + 9  # f0, f1, f2 by rank, and f5 for the stopped rank
    assert text.endswith(f"; and {64 - shown} more ranks in 3 other frames")
    assert len(text) < 400
    # ranks of one frame spread wide are counted, not listed; a thousand in one frame are a range
    assert where_stuck([stack(r, "<module>", "main", "all_reduce") for r in range(1024)], 1).startswith(
        "ranks 0–1023 of attempt 1 stuck in main → all_reduce")


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed")
def test_a_real_dump_names_the_function_a_process_waits_in():
    code = "import time\ndef waiting_for_peer():\n    time.sleep(60)\nwaiting_for_peer()\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.0)
        ref = ProcRef.of(psutil.Process(proc.pid))
        got = dump(ref)
        assert got.ok, got.error
        assert got.main()[0].name == "waiting_for_peer"
    finally:
        proc.kill()
        proc.wait()
    assert not dump(ref).ok and dump(ref).error == "the process is gone"


JOB = textwrap.dedent("""\
    import sys

    def wait_for_peers():          # rank 0: blocked, as in a collective whose peer froze
        print("waiting", flush=True)
        sys.stdin.read()

    def forward(x):                # rank 1: computing, until the fault stops it
        print("in forward", flush=True)
        while True:
            x = (x * 1.0001) % 7.0

    def train_step(rank):
        if rank == 0:
            wait_for_peers()
        else:
            forward(1.0)

    def train(rank):
        train_step(rank)

    train(int(sys.argv[1]))
    """)


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed")
def test_a_real_stopped_rank_is_read_and_named_apart_from_the_rank_waiting_for_it(tmp_path: Path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    procs = [subprocess.Popen([sys.executable, str(job), str(rank)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for rank in (0, 1)]
    try:
        assert [p.stdout.readline().strip() for p in procs if p.stdout] == ["waiting", "in forward"]
        ranks = [ProcRef.of(psutil.Process(p.pid), rank=rank, node="local") for rank, p in enumerate(procs)]
        procs[1].send_signal(signal.SIGSTOP)  # as hang-collective does
        deadline = time.time() + 10
        while psutil.Process(procs[1].pid).status() != psutil.STATUS_STOPPED and time.time() < deadline:
            time.sleep(0.05)
        stacks = [dump(r) for r in ranks]
        assert all(s.ok for s in stacks), [s.error for s in stacks]
        assert psutil.Process(procs[1].pid).status() == psutil.STATUS_STOPPED  # read, and left stopped
        text = where_stuck(stacks, 0, Hit.among(ranks, [ranks[1]], "stopped"))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    # the lines are where each was read: its print, or its read or loop
    assert re.fullmatch(r"ranks 0–1 of the first attempt share train → train_step; rank 0 in wait_for_peers \(job\.py:[45]\); "
                        r"rank 1, the one the fault stopped, in forward \(job\.py:(8|9|10)\)", text), text
