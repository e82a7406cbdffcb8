"""Renderings of the reports, which are data: the tables the command prints (text.py) and the plots (plots.py,
matplotlib). May import the reports' packages and `settings` (to write the settings a message names); nothing but
the reports' convenience methods and the CLI imports them."""
