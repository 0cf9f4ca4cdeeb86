"""Fuzz the loaders as a user's typos and a hostile file would: N seeded mutations of the
catalogue's drill specs, the suites and a drill.yaml with ray, ssh and protected clusters,
plus random bytes. Prints how many loaded, how many were refused cleanly (SpecError, exit 2
with file:line) and how many raised anything else (tracebacks; must be 0), and the slowest.

    python bench/input_fuzz.py [--cases 1200] [--seed 0]
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drillbit.core.errors import SpecError  # noqa: E402
from drillbit.spec.load import catalogue, load_suite, suite_catalogue
from drillbit.faults.loading import load_config, load_drill  # noqa: E402
from tests.unit.test_input_never_crashes import CONFIG, mutate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    config = load_config(None)
    specs = [p.read_text() for p in catalogue().values()]
    suites = [p.read_text() for p in suite_catalogue().values()]
    kinds = [("spec", lambda p: load_drill(p, config), specs), ("suite", lambda p: load_suite(str(p), config), suites),
             ("drill.yaml", load_config, [CONFIG])]
    counts = {"accepted": 0, "clean error": 0, "traceback": 0}
    slowest = (0.0, "")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.yaml"
        for n in range(args.cases):
            kind, load, sources = kinds[n % 3]
            if n % 10 == 9:
                path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))))
                kind = "bytes"
            else:
                path.write_text(mutate(rng.choice(sources), rng))
            t0 = time.perf_counter()
            try:
                load(path)
                counts["accepted"] += 1
            except SpecError:
                counts["clean error"] += 1
            except Exception:
                counts["traceback"] += 1
                print(f"case {n} ({kind}):\n{path.read_text(errors='replace')}\n{traceback.format_exc()}")
            slowest = max(slowest, (time.perf_counter() - t0, kind))
    print(f"{args.cases} cases (seed {args.seed}): " + ", ".join(f"{v} {k}" for k, v in counts.items())
          + f"; slowest {slowest[0] * 1000:.1f} ms ({slowest[1]})")


if __name__ == "__main__":
    main()
