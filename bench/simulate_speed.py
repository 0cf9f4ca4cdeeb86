"""Fleet simulator speed: wall time for 1,000 trials of the Llama 3 scenario (16,384 GPUs,
54 days), and how it grows with GPUs and days. Median of --repeat runs each.
"""
from __future__ import annotations

import argparse
import statistics
import time

from drillbit.judging.fleet.simulate import load_scenario, params_for, simulate

FIXED = dict(save_s=60.0, interval_s=3600.0, detect_s=300.0, restart_s=600.0)


def timed(scenario, repeat: int, trials: int, **over) -> float:
    params = params_for(scenario, **FIXED, **over)
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        simulate(scenario, params, trials=trials, seed=i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--trials", type=int, default=1000)
    args = p.parse_args()
    llama = load_scenario("llama3-405b")
    base = timed(llama, args.repeat, args.trials)
    print(f"llama3-405b, 16,384 GPUs, 54 days, {args.trials} trials: median {base * 1000:.1f} ms "
          f"over {args.repeat} runs (goal: well under 5 s)")
    print(f"{'GPUs':>8}{'days':>6}{'ms':>10}{'x base':>8}")
    for gpus in (1024, 4096, 16384, 65536):
        for days in (14, 54, 180):
            t = timed(llama, args.repeat, args.trials, gpus=gpus, days=days)
            print(f"{gpus:>8}{days:>6}{t * 1000:>10.1f}{t / base:>8.2f}")
    opt = load_scenario("opt-175b")
    t = timed(opt, args.repeat, args.trials)
    print(f"opt-175b with the spare pool (sequential per trial), {args.trials} trials: {t * 1000:.1f} ms")


if __name__ == "__main__":
    main()
