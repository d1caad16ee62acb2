"""Deprecated alias: `python -m bench.report` runs `xferbench-report` (bench.cli.report)."""
if __name__ == "__main__":
    from bench.cli.deprecated import forward
    forward("bench.report", "xferbench-report", "bench.cli.report")
