"""Prompt construction: the model-input formats of run_exp (and, later, in-context templates)."""
