"""``python -m vecenv bench`` / ``python -m vecenv check ENV``."""

import sys

from vecenv.cli import main

if __name__ == "__main__":
    sys.exit(main())
