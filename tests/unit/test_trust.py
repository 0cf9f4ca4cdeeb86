"""What root trusts (#57, core/trust.py), on real folders chowned to a uid no account holds: every
object from / to the target is root's or the invoking user's and writable by no one else, links
are followed only once checked, DRILLBIT_SAFE_DIRECTORY trusts a folder as git's safe.directory
does. The attacks themselves, run as that user, are in integration/test_root_config_trust.py."""
from __future__ import annotations

import os
import pwd
import sqlite3

import pytest

from drillbit.core import trust
from drillbit.core.errors import ConfigError
from drillbit.core.history import History

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: files of another uid are made by chown")


def stranger() -> int:
    """A uid no account holds (nothing is added to /etc/passwd)."""
    for uid in range(62000, 62500):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise RuntimeError("no free uid")


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.delenv(trust.SETTING, raising=False)


def config_in(folder, mode=0o644):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "drill.yaml"
    path.write_text("default_cluster: local\n")
    os.chmod(path, mode)
    return path


def test_roots_own_files_are_trusted_and_the_message_for_anothers_names_owner_and_setting(tmp_path):
    mine = config_in(tmp_path / "mine")
    trust.check(mine, "drill.yaml")
    uid = stranger()
    theirs = config_in(tmp_path / "theirs")
    os.chown(theirs, uid, uid)
    with pytest.raises(ConfigError) as refused:
        trust.check(theirs, "drill.yaml")
    text = str(refused.value)
    assert f"belongs to uid {uid} (no account)" in text and str(theirs) in text
    assert f"{trust.SETTING}={tmp_path / 'theirs'}" in text, text


def test_a_root_file_in_a_folder_another_user_owns_is_not_trusted(tmp_path):
    """The folder's owner can swap the file: every folder on the path matters."""
    uid = stranger()
    path = config_in(tmp_path / "theirs")
    os.chown(tmp_path / "theirs", uid, uid)
    with pytest.raises(ConfigError, match=f"{tmp_path / 'theirs'} belongs to uid {uid}"):
        trust.check(path, "drill.yaml")


def test_writable_folders_sticky_ones_and_the_target_itself(tmp_path):
    open_folder = tmp_path / "open"
    path = config_in(open_folder)
    os.chmod(open_folder, 0o777)
    with pytest.raises(ConfigError, match="is mode 777: anyone can write it"):
        trust.check(path, "drill.yaml")
    os.chmod(open_folder, 0o1777)  # sticky (/tmp): only the entry's owner (root) renames it
    trust.check(path, "drill.yaml")
    with pytest.raises(ConfigError, match="is mode 1777: anyone can write it"):
        trust.check(open_folder, "reports folder")  # but never as the folder root writes in
    os.chmod(path, 0o666)
    with pytest.raises(ConfigError, match="is mode 666"):
        trust.check(path, "drill.yaml")


def test_a_group_that_is_roots_alone_may_write_and_any_other_may_not(tmp_path):
    path = config_in(tmp_path / "g", 0o664)
    os.chown(path, 0, 0)  # group root: no member but root (a private group under umask 002)
    trust.check(path, "drill.yaml")
    gid = stranger()  # no such group: no one can say who is in it
    os.chown(path, 0, gid)
    with pytest.raises(ConfigError, match=f"group {gid} \\(no such group\\) can write it"):
        trust.check(path, "drill.yaml")


def test_links_are_followed_only_once_checked(tmp_path):
    real = config_in(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    trust.check(tmp_path / "link" / "drill.yaml", "drill.yaml")
    uid = stranger()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o1777)
    planted = shared / "drill.yaml"
    planted.symlink_to(real)  # root's file, but reached through a link another user placed
    os.lchown(planted, uid, uid)
    with pytest.raises(ConfigError, match=f"{planted} belongs to uid {uid}"):
        trust.check(planted, "drill.yaml")


def test_the_invoking_user_under_sudo_is_trusted_and_no_one_else(tmp_path, monkeypatch):
    uid = stranger()
    path = config_in(tmp_path / "theirs")
    os.chown(path, uid, uid)
    monkeypatch.setenv("SUDO_UID", str(uid))
    trust.check(path, "drill.yaml")
    monkeypatch.setenv("SUDO_UID", str(uid + 1))
    with pytest.raises(ConfigError, match=f"no one but root or the user who ran sudo, uid {uid + 1} \\(no account\\)"):
        trust.check(path, "drill.yaml")


def test_the_setting_trusts_a_folder_and_what_is_in_it(tmp_path, monkeypatch):
    uid = stranger()
    path = config_in(tmp_path / "theirs")
    os.chown(tmp_path / "theirs", uid, uid)
    os.chown(path, uid, uid)
    monkeypatch.setenv(trust.SETTING, f"/nowhere:{tmp_path / 'theirs'}")
    trust.check(path, "drill.yaml")
    monkeypatch.setenv(trust.SETTING, str(tmp_path / "other"))
    with pytest.raises(ConfigError):
        trust.check(path, "drill.yaml")
    monkeypatch.setenv(trust.SETTING, "*")
    trust.check(path, "drill.yaml")
    monkeypatch.setenv(trust.SETTING, "relative/folder")
    with pytest.raises(ConfigError, match="'relative/folder' is not an absolute path"):
        trust.check(path, "drill.yaml")


def test_not_root_nothing_is_checked_for_owners(tmp_path, monkeypatch):
    uid = stranger()
    path = config_in(tmp_path / "theirs")
    os.chown(path, uid, uid)
    monkeypatch.setattr(trust.os, "geteuid", lambda: 1000)
    trust.check(path, "drill.yaml")


def test_a_folder_is_made_through_checked_links_and_opened_once(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "reports").symlink_to("store")
    with trust.folder(tmp_path / "reports" / "a" / "b", "reports folder", create=True) as made:
        assert made.path == tmp_path / "store" / "a" / "b" and made.path.is_dir()
        os.rename(tmp_path / "store", tmp_path / "moved")  # renamed meanwhile: the name made goes with it
        os.mkdir("run", dir_fd=made.fd)
    assert (tmp_path / "moved" / "a" / "b" / "run").is_dir()
    uid = stranger()
    os.chown(tmp_path / "moved", uid, uid)
    with pytest.raises(ConfigError, match="belongs to uid"), \
            trust.folder(tmp_path / "moved" / "a" / "c", "reports folder", create=True):
        pass
    assert not (tmp_path / "moved" / "a" / "c").exists()  # refused before anything was made past it


def test_history_and_results_store_refuse_a_link_or_a_fifo_at_their_name(tmp_path):
    target = tmp_path / "target"
    (tmp_path / "history.jsonl").symlink_to(target)
    with pytest.raises(OSError, match="a symbolic link"):
        History(tmp_path / "history.jsonl")
    with pytest.raises(OSError, match="a symbolic link"):
        History.load(tmp_path / "history.jsonl")
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(OSError, match="not a regular file"):
        History.load(tmp_path / "fifo.jsonl")  # before: blocked for ever
    from drillbit.runs.store import Store

    (tmp_path / "drills.db").symlink_to(target)
    with pytest.raises(ConfigError, match="results store .*drills.db: a symbolic link"):
        Store(tmp_path / "drills.db")
    assert not target.exists()
    with Store(tmp_path / "r" / "drills.db") as store:
        assert store.path == tmp_path / "r" / "drills.db" and store.runs() == []
    assert sqlite3.connect(tmp_path / "r" / "drills.db").execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)
