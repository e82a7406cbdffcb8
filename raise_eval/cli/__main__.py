"""`python -m raise_eval.cli`: the `raise-eval` command."""

import sys

from raise_eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
