"""One run from checked settings to rows on disk: the plan, the run folder, the machine's
description, each suite's sweep (in this process or in ranks), the summary."""
