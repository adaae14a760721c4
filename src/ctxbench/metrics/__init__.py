"""Metrics of the run stage: faithfulness (RISE, MAS, RISE+AP), recovery (Recall@10%), coverage (legacy)."""
