"""Renderings of the reports, which are data: the tables the command prints (text.py) and the plots (plots.py,
matplotlib). May import `settings` (to write the settings a message names), `units`, `stats`, `diagnostics` (the
verdict's thresholds) and `io.writing`; never the reports' packages, whose convenience methods (`format_table`,
`format`, `plot`) import these, as the CLI does."""
