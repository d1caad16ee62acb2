"""Old `python -m` entry points kept as aliases: each says what replaced it, then runs it."""
from __future__ import annotations

import importlib
import sys


def forward(old: str, new: str, module: str, *args: str) -> None:
    """Run `module`'s main with `args` before the command line, after a deprecation line."""
    print(f"xferbench: `python -m {old}` is deprecated; use `{new}`", file=sys.stderr)
    sys.exit(importlib.import_module(module).main([*args, *sys.argv[1:]]))
