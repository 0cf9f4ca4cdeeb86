"""Drill specs, suites and cluster config: typed models and their YAML loader."""
