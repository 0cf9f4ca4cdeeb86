"""Where a hang is stuck, from hand-built dumps (the shape py-spy's --json gives), and one real
py-spy dump of a process this test starts."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from drillbit.core.pystacks import Frame, RankStack, dump, py_spy, shared_frames, where_stuck
from drillbit.core.proc import ProcRef


def stack(rank: int, *names: str, ok: bool = True) -> RankStack:
    """Frames given outermost first, stored innermost first as py-spy does."""
    frames = [Frame(name=n, file=f"/x/{n}.py", line=i + 1) for i, n in enumerate(names)]
    return RankStack(pid=100 + rank, rank=rank, ok=ok, threads={"MainThread": list(reversed(frames))} if ok else {},
                     error="" if ok else "py-spy cannot attach: Permission denied")


def test_the_frames_every_rank_shares_innermost_are_quoted_per_attempt():
    stacks = [stack(r, "<module>", "main", "init_process_group", "rendezvous", "_create_c10d_store") for r in range(3)]
    assert [f.name for f in shared_frames(stacks)] == ["init_process_group", "rendezvous", "_create_c10d_store"]
    text = where_stuck(stacks, 1)
    assert text.startswith("ranks 0–2 of attempt 1 stuck in init_process_group → rendezvous → _create_c10d_store")


def test_ranks_that_part_are_cut_where_they_part_and_one_unread_rank_is_named():
    stacks = [stack(0, "<module>", "main", "restore", "read_shard"), stack(1, "<module>", "main", "restore", "barrier"),
              stack(2, ok=False)]
    text = where_stuck(stacks, 0)
    assert "ranks 0, 1 of the first attempt stuck in main → restore" in text
    assert "1 rank(s) not read (py-spy cannot attach: Permission denied)" in text


def test_no_readable_stack_says_why_and_concludes_nothing():
    assert where_stuck([stack(0, ok=False)], 1).startswith("the ranks' stacks could not be read: py-spy cannot attach")
    assert where_stuck([], 1).startswith("no live rank")


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
