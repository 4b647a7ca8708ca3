"""``python -m train`` (also what ``ray job submit … -- python -m train --config …`` runs)."""

import sys

from train.cli import main

if __name__ == "__main__":
    sys.exit(main())
