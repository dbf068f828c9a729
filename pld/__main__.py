"""``python -m pld``: the ``pld`` command (same as the console script)."""

import sys

from pld.cli import main

if __name__ == "__main__":
    sys.exit(main())
