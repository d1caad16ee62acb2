"""From input to a typed Config: the settings every suite shares, the root schema built from the
suite registry, and where the YAML files are."""
