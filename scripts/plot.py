#!/usr/bin/env python3
"""Plot xferbench results (the same as `xferbench-plot`): see `python scripts/plot.py --help`."""
import sys

from bench.cli.plot import main

if __name__ == "__main__":
    sys.exit(main())
