"""Stands for Triton being installed: a plan looks for it (importlib.util.find_spec) and imports nothing."""
raise ImportError("the stand-in for triton is found by a plan, never imported")
