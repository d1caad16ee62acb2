"""Deprecated alias: `python -m bench.compare` runs `xferbench-compare` (bench.cli.compare)."""
if __name__ == "__main__":
    from bench.cli.deprecated import forward
    forward("bench.compare", "xferbench-compare", "bench.cli.compare")
