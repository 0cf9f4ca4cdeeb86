"""Run folders: one maker for every kind of run, never reusing a folder."""
from __future__ import annotations

import threading

from drillbit.core.runfolder import new_folder, write_files


def test_folders_of_one_second_are_numbered_and_never_shared(tmp_path):
    made: list = []
    lock = threading.Lock()

    def make():
        folder = new_folder(tmp_path / "reports", "game-day", kind="gameday")
        with lock:
            made.append(folder)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 8 and all(f.is_dir() and f.name.startswith("gameday-") for f in made)
    assert any(f.name.endswith("-game-day") for f in made)


def test_a_drill_folder_is_stamp_then_name_and_files_are_written_whole(tmp_path):
    folder = new_folder(tmp_path, "kill-rank")
    assert folder.name.endswith("-kill-rank") and folder.name[:8].isdigit()
    write_files(folder, {"a.md": "# a\n", "b.json": "{}\n"})
    assert (folder / "a.md").read_text() == "# a\n" and sorted(p.name for p in folder.iterdir()) == ["a.md", "b.json"]


def test_a_run_folder_is_private_under_umask_002(tmp_path):
    """#43: with Ubuntu's default umask 002 every local-process drill was refused: its run folder,
    where the agent keeps its registry, came out 775."""
    import os
    import stat

    from drillbit.core.runfolder import new_folder
    from drillbit.core.statedir import check_private

    old = os.umask(0o002)
    try:
        folder = new_folder(tmp_path / "reports", "kill-rank")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    check_private(folder)  # the agent's own check passes
