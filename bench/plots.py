"""Deprecated alias: `python -m bench.plots` runs `xferbench-plot` (bench.cli.plot)."""
if __name__ == "__main__":
    from bench.cli.deprecated import forward
    forward("bench.plots", "xferbench-plot", "bench.cli.plot")
