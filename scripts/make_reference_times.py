#!/usr/bin/env python3
"""Make the reference table the plan estimates from (bench/driver/reference_times.json): every
usable run under results/reference, each run's median time per operation by series and size.
Run from the repository root after committing reference runs; the tests fail while it is stale.

  python scripts/make_reference_times.py
"""
from __future__ import annotations

from bench.driver.reference_times import TABLE, folder_runs, table_text

if __name__ == "__main__":
    kinds = folder_runs()
    TABLE.write_text(table_text(kinds))
    print(f"{TABLE}: {sum(len(runs) for runs in kinds.values())} runs of {len(kinds)} machine kinds")
