#!/usr/bin/env python3
"""Compare xferbench runs (the same as `xferbench-compare`): see `python scripts/compare.py --help`."""
import sys

from bench.cli.compare import main

if __name__ == "__main__":
    sys.exit(main())
