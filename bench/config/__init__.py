"""The settings every suite shares and where the YAML files are; the root schema, built from the
suite registry, is bench.driver.schema (a floor above the suites)."""
