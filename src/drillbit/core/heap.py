"""The objects alive now, frozen out of the garbage collector's walks while a large piece of
work runs (a check, a history read back): at 1,024 simulated nodes every collection walked the
drill's 14,000 events and their payloads again, and the work cost up to twice what it cost
alone (docs/fleet-scale.md)."""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_LOCK = threading.Lock()
_freezers = [0, False]  # works inside the freeze now; whether the first of them froze (nobody else had)


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """The heap frozen out of the collector's walks while any such work runs, and thawed when
    the last one ends; a process that froze its own objects before is left as it was. What the
    work itself leaves is still collected. One freeze the process makes from another thread
    while such work runs is thawed with it when the work ends: the collector counts what is
    frozen, not who froze it (drillbit itself freezes nowhere else)."""
    with _LOCK:
        if _freezers[0] == 0:
            _freezers[1] = gc.get_freeze_count() == 0
            if _freezers[1]:
                gc.freeze()
        _freezers[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _freezers[0] -= 1
            if _freezers[0] == 0 and _freezers[1]:
                gc.unfreeze()
