"""``python -m eval`` is the ``kairos`` CLI (for ray jobs and environments without the console script)."""

import sys

from eval.cli import main

sys.exit(main())
