"""Datasets to try the pipeline suite's `pipeline.dataset=` with: real work per sample, made here."""
