#!/usr/bin/env python3
"""Make the reference table the plan estimates from (bench/driver/reference_times.json): every
usable run under results/reference, each run's median time per operation by series and size.
Run from the repository root after committing reference runs; the tests fail while it is stale.

  python scripts/make_reference_times.py
"""
from __future__ import annotations

import argparse
import sys

from bench.driver.reference_times import REFERENCE_ROOT, TABLE, folder_runs, table_text


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    kinds = folder_runs()
    if not kinds:   # an installed package has no results/ beside it: keep the table it ships
        print(f"make_reference_times: no reference runs under {REFERENCE_ROOT} (run it in a checkout)", file=sys.stderr)
        return 2
    TABLE.write_text(table_text(kinds))
    print(f"{TABLE}: {sum(len(runs) for runs in kinds.values())} runs of {len(kinds)} machine kinds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
