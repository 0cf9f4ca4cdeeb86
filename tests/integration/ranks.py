"""Ranks per torchrun in the jobs these tests write themselves (the Trainer, Lightning and
own-loop jobs): 2, as the reference job runs here (conftest.py, ``DRILLBIT_REFERENCE_NPROC``).
A rank's start is mostly its imports (``import torch`` 1.3 CPU-s, Lightning's 3.7 more) and
every drill starts each rank twice; the drills target rank 1, the one rank besides rank 0
(which writes the checkpoints)."""
NPROC = "2"
