"""drillbit's runs layer."""
