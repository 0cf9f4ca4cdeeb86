"""Probes turn a job's own signals (log lines, heartbeat files) into history events."""
