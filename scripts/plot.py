#!/usr/bin/env python3
"""Plot xferbench results (the same as `xferbench-plot`): see `python scripts/plot.py --help`."""
import sys

from bench.plots import main

if __name__ == "__main__":
    sys.exit(main())
