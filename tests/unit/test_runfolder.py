"""Run folders: one maker for every kind of run, never reusing a folder."""
from __future__ import annotations

import threading

from drillbit.runfolder import new_folder, write_files


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
