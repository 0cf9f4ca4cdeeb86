"""drillbit's judging layer."""
