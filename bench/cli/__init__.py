"""The command lines: xferbench (run), xferbench-plot, -report, -compare, -summary."""
