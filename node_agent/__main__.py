"""`python -m node_agent ...` is `node-agent ...` (useful where the console script is not installed)."""

import sys

from node_agent.cli import main

sys.exit(main())
