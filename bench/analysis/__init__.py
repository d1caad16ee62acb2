"""Reading results: which runs, tables, figures, the report and the regression gate. Imports no
suite and no torch: what it needs of a suite (its tables, figures, headline, noise) comes from
the registry through the command lines, as a catalog (bench.suite_view)."""
