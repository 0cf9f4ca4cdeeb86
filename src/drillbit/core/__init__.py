"""drillbit's core layer."""
