"""Experiment trackers (the ``logger`` group), the objective of optimising sweeps (docs/tracking.md)."""
