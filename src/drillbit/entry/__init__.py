"""drillbit's entry layer."""
