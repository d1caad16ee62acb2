"""Import other tools' results as xferbench runs: one module per tool (nccl_tests, nvbandwidth),
each parsing the tool's output and writing it as a run folder through run_folder.

An imported run is an ordinary run folder (samples + meta.json), so plots and compare treat it
like a measured one.
"""
