"""Run xferbench with a process-wide setting first: python .dev/with.py SETTING -- xferbench args.
SETTING: file_system (torch.multiprocessing's sharing strategy) or switch=SECONDS (sys.setswitchinterval)."""
import os
import runpy
import sys

sys.path.insert(0, os.getcwd())
setting, args = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
if setting == "file_system":
    import torch.multiprocessing
    torch.multiprocessing.set_sharing_strategy("file_system")
elif setting.startswith("switch="):
    sys.setswitchinterval(float(setting.split("=")[1]))
sys.argv = ["xferbench", *args]
runpy.run_module("bench", run_name="__main__")
