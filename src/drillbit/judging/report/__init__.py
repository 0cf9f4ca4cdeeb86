"""Run output, written from the history after the checkers ran: result.json (the contract),
report.md and a self-contained report.html with its SVG timeline, junit.xml, the console
summary, runbooks, and the SQLite results store that baselines and trends read."""
