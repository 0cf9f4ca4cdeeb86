"""drillbit: chaos drills for the recovery path of large distributed training jobs."""
__version__ = "0.1.0"
