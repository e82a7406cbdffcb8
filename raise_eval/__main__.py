"""`python -m raise_eval`: the `raise-eval` command (e.g. where the console script is not on PATH)."""

import sys

from raise_eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
