"""#56: ``--wait`` queues behind the cluster's lease through the lease's own atomic acquire,
so waiting never lets two holders in; without it a busy cluster is refused at once, naming
the holder. The engines' acquires are stood in for by real file-lock leases (the local
engines' own) and, for the retry logic alone, a function that refuses a given number of
times. No test here asserts a duration: only what was said, in what order, and who held."""
from __future__ import annotations

import threading

import pytest

from drillbit.core.errors import ConfigError, LeaseError
from drillbit.core.lease import Lease, LeaseWait, take


def refusing(times: int, held: str = "cluster 'c' is held by drill a (pid 1 on h, since then)"):
    """An acquire that is refused ``times`` times, then succeeds; and the count of its tries."""
    tries = []

    def acquire() -> str:
        tries.append(1)
        if len(tries) <= times:
            raise LeaseError(held)
        return "lease"
    return acquire, tries


@pytest.fixture()
def no_pauses(monkeypatch):
    monkeypatch.setattr("drillbit.core.lease.time.sleep", lambda _s: None)


def test_without_wait_a_busy_cluster_is_refused_at_once_naming_the_holder():
    acquire, tries = refusing(1)
    said: list[str] = []
    with pytest.raises(LeaseError, match=r"is held by drill a \(pid 1 on h, since then\); wait for it to finish "
                                         r"\(--wait\), or stop it") as caught:
        take(acquire, None, said.append)
    assert len(tries) == 1 and not said
    assert isinstance(caught.value, ConfigError)  # exit 2 on every command, through the one CLI handler


def test_wait_asks_again_until_free_saying_once_that_it_waits_and_once_that_it_goes_on(no_pauses):
    acquire, tries = refusing(5)
    said: list[str] = []
    assert take(acquire, LeaseWait(), said.append) == "lease"
    assert len(tries) == 6
    assert len(said) == 2
    assert said[0].startswith("cluster 'c' is held by drill a (pid 1 on h, since then); waiting for it, without a limit")
    assert said[1].startswith("the cluster is free")


def test_wait_past_its_limit_is_refused_naming_the_holder(no_pauses):
    acquire, tries = refusing(10**9, held="cluster 'c' is held by drill b (pid 2 on h, since then)")
    said: list[str] = []
    with pytest.raises(LeaseError, match=r"held by drill b .*still held after waiting 0\.0 s \(--wait\)"):
        take(acquire, LeaseWait(limit=0.01), said.append)
    assert len(tries) > 1 and len(said) == 1 and "up to 0.0 s" in said[0]


def test_a_free_cluster_is_taken_at_once_with_nothing_said():
    acquire, tries = refusing(0)
    said: list[str] = []
    assert take(acquire, LeaseWait(), said.append) == "lease"
    assert len(tries) == 1 and not said


def test_an_unusable_lease_file_is_a_config_error_not_a_wait(tmp_path, monkeypatch):
    """A lease folder that cannot hold the file is the environment's fault: no wait mends it."""
    monkeypatch.setattr("drillbit.core.lease.lease_path", lambda _c: tmp_path / "missing" / "lease.lock")
    with pytest.raises(ConfigError, match="cannot open its lease file") as caught:
        take(lambda: Lease("c", "me").acquire(), LeaseWait(), lambda _t: None)
    assert not isinstance(caught.value, LeaseError)


def test_waiters_on_a_real_lease_never_hold_it_together():
    """The file lock the local engines lease by, taken by three waiters at once while a fourth
    holds it: each gets it in turn, never two at a time, and every one gets it."""
    first = Lease("shared", "first")
    first.acquire()
    guard = threading.Lock()
    holding: list[str] = []
    overlaps: list[list[str]] = []
    done: list[str] = []
    errors: list[BaseException] = []

    def waiter(name: str) -> None:
        try:
            lease = Lease("shared", name)
            take(lease.acquire, LeaseWait(limit=120), lambda _t: None)
            with guard:
                holding.append(name)
                if len(holding) > 1:
                    overlaps.append(list(holding))
            threading.Event().wait(0.05)  # hold it a moment, so an overlap would show
            with guard:
                holding.remove(name)
                done.append(name)
            lease.release()
        except BaseException as exc:  # noqa: BLE001 — the test reads it below
            errors.append(exc)

    threads = [threading.Thread(target=waiter, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    first.release()
    for t in threads:
        t.join(timeout=150)
    assert not errors and not overlaps
    assert sorted(done) == ["w0", "w1", "w2"]
