"""The xferbench command's entry (`xferbench`, `python -m bench`, torchrun's ranks): its signal
handlers first (bench/interrupts.py), then the command itself (bench/cli/command.py), whose
imports (Hydra, the schema, every suite) take a second or more; a signal meanwhile waits for
them to finish rather than cutting one short. An interrupt the run did not answer itself (it
came before any run folder was made) is one line here, exit 128 + the signal's number."""
from __future__ import annotations

import gc
import sys

from bench import interrupts


def main() -> None:
    interrupts.install()
    code: int | str | None
    try:
        from bench.cli import command   # after the handlers: see above

        try:
            command.main()
            code = 0
        except SystemExit as exc:
            code = exc.code
        if not code:
            interrupts.check()   # one that came after the run's last check (a plan, --help) ends it as one
    except KeyboardInterrupt:
        stop = interrupts.handled()
        print(f"xferbench: interrupted ({stop.name}); no run folder was made", file=sys.stderr)
        code = stop.code
    interrupts.closing("xferbench: interrupted ({name}) as it exited; nothing was lost")
    # The interpreter's teardown collects every object left, torch's hundreds of thousands among
    # them: a second or more of a short run. None of them is the run's to finish now.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    main()
