#!/usr/bin/env python3
"""Import nvbandwidth JSON output (nvbandwidth -j) as an xferbench run.

Host<->device copies and latency become the copy suite, GPU<->GPU ones the p2p suite (engine
ce or sm, mode read or write); whole-machine tests (host_to_all, all_to_one, ...) become rows per
GPU plus their total. The JSON does not record the buffer size: pass the -b you ran with. Tests
that failed, and the multi-node build's, are listed as not imported.
"""
from __future__ import annotations

import argparse
import sys

from bench import ConfigError
from bench.importers.nvbandwidth import import_nvbandwidth
from bench.results import ResultsError, read_meta
from bench.sizes import parse_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: nvbandwidth -j > nvb.json && python scripts/import_nvbandwidth.py nvb.json "
               "--out results/h200-x8/nvbandwidth-1 --instance h200-x8")
    parser.add_argument("files", nargs="+", metavar="JSON", help="nvbandwidth -j output saved to a file")
    parser.add_argument("--out", required=True, metavar="RUN_DIR", help="a new run folder to create")
    parser.add_argument("--buffer-size", default="512MiB",
                        help="the buffer size nvbandwidth ran with (its -b; default 512MiB, nvbandwidth's "
                             "default since v0.5; 64MiB before)")
    parser.add_argument("--instance", help="instance name; a conf/instance/<name>.yaml entry adds its link specs "
                                           "and price (default: the host name in the JSON)")
    parser.add_argument("--numa", choices=("local", "none"), default="local",
                        help="where the host buffers were: local (nvbandwidth binds them to each GPU's NUMA "
                             "node) or none if it ran with -d/--disableAffinity (default: local)")
    parser.add_argument("--run-id", help="run id (default: the folder's name)")
    args = parser.parse_args(argv)
    try:
        buffer_bytes = parse_size(args.buffer_size, "--buffer-size")
        run = import_nvbandwidth(args.files, args.out, buffer_bytes, args.instance, args.run_id, args.numa)
    except (ResultsError, ConfigError) as exc:
        print(f"import_nvbandwidth: {exc}", file=sys.stderr)
        return 2
    for line in read_meta(run).get("not_imported", []):
        print(f"not imported: {line}", file=sys.stderr)
    print(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
