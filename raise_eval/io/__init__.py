"""Input and output: named datasets and array files (datasets.py), an evaluation's or a BDMC run's inputs
loaded once (inputs.py), the user's own model files (user_model.py), what a command writes and the checks before
it (run_files.py, outputs.py), and JSON documents (results.py). May import `raise_eval.models`, `settings` and, in
functions, the protocol packages' plans; never the CLI."""
