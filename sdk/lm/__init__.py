"""Byte-level language modelling: corpora, training, diagnostics, sweeps, export, profiling."""
