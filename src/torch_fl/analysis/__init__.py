"""Readiness analysis of a model on a device: coverage, precision, performance alignment, grading.

Heavy: imported only by the CLI commands and by users who ask for it."""
