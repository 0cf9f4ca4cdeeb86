"""Slurm as an engine: the scheduler seen from the controller, agents inside the job's allocation, and a local
cluster for tests."""
