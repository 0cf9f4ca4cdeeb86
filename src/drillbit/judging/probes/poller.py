"""One way to watch something from the controller: a daemon thread that polls every ``every``
seconds until it is stopped (or has nothing more to do). The log probes, the agents' tails,
the Prometheus probe and the stop conditions are each one."""
from __future__ import annotations

import threading


class Poller:
    name = "poller"
    final_poll = False  # poll once more after the stop: what was written just before it counts

    def __init__(self, every: float, join_timeout: float = 5.0) -> None:
        self._every = every
        self._join_timeout = join_timeout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> None:
        raise NotImplementedError

    def explain(self) -> str:
        """What it read, in words, for a job that never reached steady state ('' : nothing)."""
        return ""

    def done(self) -> bool:
        """True when there is nothing more to poll for (the thread ends on its own)."""
        return False

    def _poll_step(self) -> None:
        self.poll_once()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and not self.done():
            self._poll_step()
            self._stop.wait(self._every)
        if self.final_poll:
            self._poll_step()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._join_timeout)
