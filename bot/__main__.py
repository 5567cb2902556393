"""`python -m bot ...` runs the `triage` command line (where the console script is not installed)."""

import sys

from bot.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
