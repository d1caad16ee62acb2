# XB_PHASES=prefix: wall time per phase (count, seconds) of each process, written to prefix-<rank>.json at exit,
# plus a timeline of events (module imports of interest, suite start/finish) with times since process start.
import os, sys, time, json, atexit, types, importlib.abc, importlib.util, functools
if os.environ.get("XB_PHASES"):
    T0 = time.perf_counter(); WALL0 = time.time()
    acc = {}; events = []
    def timed(name, fn):
        @functools.wraps(fn)
        def w(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                c = acc.setdefault(name, [0, 0.0]); c[0] += 1; c[1] += time.perf_counter() - t
        return w
    def timed_gen(name, fn):
        @functools.wraps(fn)
        def w(*a, **k):
            g = fn(*a, **k)
            while True:
                t = time.perf_counter()
                try:
                    x = next(g)
                except StopIteration:
                    c = acc.setdefault(name, [0, 0.0]); c[0] += 1; c[1] += time.perf_counter() - t
                    return
                c = acc.setdefault(name, [0, 0.0]); c[0] += 1; c[1] += time.perf_counter() - t
                yield x
        return w
    PATCH = {
        "bench.measure.timing": ["warm_up", "calibrate", "_trials", "_wait_for_host", "host_pace", "measure", "measure_graph", "_paced", "_any_slow"],
        "bench.measure.consensus": [("Consensus", "reduce")],
        "bench.journal": [("RunWriter", "add_point"), ("RunWriter", "close")],
        "bench.driver.runner": ["run_suite"],
        "bench.driver.app": ["_run_suites", "_summarize", "_verdicts", "_this_machine", "_open_run", "_measure"],
        "bench.driver.rank_group": ["run_distributed", "spawn", "init_group", "rank_main"],
        "bench.suites.collectives.measure": ["*"],
        "bench.suites.copy": [], "bench.suites.p2p": [],
        "bench.analysis.judge": ["judge"], "bench.analysis.tables": ["format_summary"],
        "bench.driver.plan": ["estimate"],
    }
    def patch(mod):
        for item in PATCH.get(mod.__name__, []):
            if item == "*":
                for n, f in list(vars(mod).items()):
                    if callable(f) and getattr(f, "__module__", None) == mod.__name__ and not isinstance(f, type):
                        setattr(mod, n, timed(f"{mod.__name__.split('.')[-2]}.{n}", f))
                    elif isinstance(f, type) and f.__module__ == mod.__name__:
                        for m, g in list(vars(f).items()):
                            if isinstance(g, types.FunctionType) and (not m.startswith("__") or m == "__call__"):
                                setattr(f, m, timed(f"{n}.{m}", g))
            elif isinstance(item, tuple):
                cls = getattr(mod, item[0], None)
                if cls is not None:
                    setattr(cls, item[1], timed(f"{item[0]}.{item[1]}", getattr(cls, item[1])))
            elif hasattr(mod, item):
                f = getattr(mod, item)
                import inspect
                setattr(mod, item, (timed_gen if inspect.isgeneratorfunction(f) else timed)(f"{mod.__name__.split('.')[-1]}.{item}", f))
        # each suite's measure hooks
        if mod.__name__.startswith("bench.suites.") and mod.__name__.count(".") == 2:
            for n, cls in list(vars(mod).items()):
                if isinstance(cls, type) and cls.__module__ == mod.__name__:
                    for m in ("measure", "start", "finish", "check", "points"):
                        if m in vars(cls):
                            f = vars(cls)[m]
                            import inspect
                            setattr(cls, m, (timed_gen if inspect.isgeneratorfunction(f) else timed)(f"{mod.__name__.split('.')[-1]}.{m}", f))
                    if "measure_together" in vars(cls):
                        setattr(cls, "measure_together", timed_gen(f"{mod.__name__.split('.')[-1]}.measure_together", vars(cls)["measure_together"]))
    WATCH = set(PATCH) | {"torch", "pandas", "hydra", "bench.driver.inventory", "torch.distributed"}
    class Finder(importlib.abc.MetaPathFinder):
        busy = set()
        def find_spec(self, name, path, target=None):
            if name not in WATCH or name in self.busy:
                return None
            self.busy.add(name)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                self.busy.discard(name)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader; orig = loader.exec_module
            def exec_module(module, orig=orig):
                t = time.perf_counter()
                orig(module)
                events.append((round(t - T0, 3), round(time.perf_counter() - t, 3), "import " + name))
                try:
                    patch(module)
                except Exception as e:
                    events.append((0, 0, f"patch {name} failed: {e!r}"))
            loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, Finder())
    def dump():
        out = {"rank": os.environ.get("RANK", "main"), "argv": sys.argv, "wall0": WALL0, "total_s": time.perf_counter() - T0,
               "phases": {k: [v[0], round(v[1], 4)] for k, v in sorted(acc.items(), key=lambda kv: -kv[1][1])}, "events": events}
        with open(f"{os.environ['XB_PHASES']}-{out['rank']}-{os.getpid()}.json", "w") as f:
            json.dump(out, f, indent=1)
    atexit.register(dump)
# XB_SAMPLE=prefix: a sampling profile of the main thread (every 2 ms), collapsed stacks written at exit
if os.environ.get("XB_SAMPLE") and os.environ.get("RANK", "0") in ("0",):
    import threading, collections, atexit as _ax, sys as _sys, time as _t
    _main = threading.main_thread().ident
    _stacks = collections.Counter()
    _stop = []
    def _sampler():
        while not _stop:
            _t.sleep(0.002)
            f = _sys._current_frames().get(_main)
            names = []
            while f is not None:
                c = f.f_code
                fn = c.co_filename
                if "/bench/" in fn or "/torch/" in fn or "/pandas/" in fn or "/hydra/" in fn or "/numpy/" in fn:
                    short = fn.split("/bench/")[-1] if "/bench/" in fn else fn.rsplit("/", 2)[-2] + "/" + fn.rsplit("/", 1)[-1]
                    names.append(f"{short}:{c.co_name}")
                f = f.f_back
            _stacks[";".join(reversed(names))] += 1
    threading.Thread(target=_sampler, daemon=True).start()
    def _dump_samples():
        _stop.append(1)
        with open(f"{os.environ['XB_SAMPLE']}-{os.environ.get('RANK', 'main')}-{os.getpid()}.txt", "w") as fh:
            for k, v in _stacks.most_common():
                fh.write(f"{v} {k}\n")
    _ax.register(_dump_samples)
