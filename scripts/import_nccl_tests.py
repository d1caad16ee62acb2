#!/usr/bin/env python3
"""Import nccl-tests output (all_reduce_perf, all_gather_perf, ...) as an xferbench run.

Reads the standard stdout table (out-of-place and in-place columns) of one or more logs, even
several tests in one log; each size becomes one point with two trials (out-of-place, in-place).
The op comes from the '# Collective test starting' line or the binary's name in the log, the
rank count from its '# Rank' lines; --op and --world-size fill in logs that lack them.
A log cut short (a test's table without the '# Avg bus bandwidth' line nccl-tests prints after
its last size) still imports what it holds, with one warning line; its meta.json says status
'interrupted' and lists why under 'incomplete'.
"""
from __future__ import annotations

import argparse
import sys

from bench.importers.nccl_tests import import_nccl_tests, op_name
from bench.results import ResultsError, read_meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: python scripts/import_nccl_tests.py all_reduce.log sendrecv.log "
               "--out results/p5.48xlarge/nccl-tests-1 --instance p5.48xlarge")
    parser.add_argument("logs", nargs="+", metavar="LOG", help="nccl-tests stdout captured to a file")
    parser.add_argument("--out", required=True, metavar="RUN_DIR", help="a new run folder to create")
    parser.add_argument("--instance", help="instance name; a conf/instance/<name>.yaml entry adds its link specs "
                                           "and price (default: the log's host name)")
    parser.add_argument("--run-id", help="run id (default: the folder's name)")
    parser.add_argument("--op", type=lambda s: op_name(s.removesuffix("_perf")),
                        help="collective, for logs that do not name their binary (e.g. all_gather or all_gather_perf)")
    parser.add_argument("--world-size", type=int, help="number of ranks, for logs without '# Rank' lines")
    args = parser.parse_args(argv)
    try:
        run = import_nccl_tests(args.logs, args.out, args.instance, args.run_id, args.op, args.world_size)
    except ResultsError as exc:
        print(f"import_nccl_tests: {exc}", file=sys.stderr)
        return 2
    incomplete = read_meta(run).get("incomplete")
    if incomplete:
        print(f"import_nccl_tests: warning: the sweep looks incomplete, so the run is marked interrupted: "
              f"{'; '.join(incomplete)}", file=sys.stderr)
    print(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
