"""The drill loop, in parts (after Jepsen's generator / nemesis / checker split).

    schedule.py  when the fault fires and at whom
    nemesis.py   inject, confirm, heal — a context manager that always heals
    watch.py     the probes built from the job profile, and the progress view
    runner.py    the phases in order, composing the parts; the nodes and probes passed in
The stop test, ``recovered(history)``, and every judgement are pure checks (drillbit.judging.checks).
"""
from drillbit.loop.runner import DrillRunner, QuietUI, RunOutcome, UI

__all__ = ["DrillRunner", "QuietUI", "RunOutcome", "UI"]
