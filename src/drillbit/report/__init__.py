"""Run output: result.json, the console summary (and later markdown, html, junit)."""
