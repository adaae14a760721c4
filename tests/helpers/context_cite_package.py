"""The context-cite package's own ablation passes (``context_cite.utils.get_masks_and_logit_probs``) on our inputs: the
second implementation the ContextCite and LDS tests compare against."""

from __future__ import annotations

import numpy as np


def package_logit_probs(monkeypatch, model, tok, mi, dropped_tokens, masks=None, n_masks: int = 32,
                        keep_prob: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """``(masks, logit_probs)`` as the package computes them: ``masks`` (n, S) in place of its seeded draws, or
    None for its own draws (``n_masks`` of them, each source kept with ``keep_prob``); source j's prompt-input
    positions ``dropped_tokens[j]`` are removed from the prompt ids where it is not kept. ``logit_probs`` (n, G):
    the package's per-token logit-probabilities of the generated tokens."""
    import nltk

    # the package downloads NLTK's Punkt model when imported; its sentence splitter is not used here, and the test
    # must not wait on the network
    monkeypatch.setattr(nltk, "download", lambda *args, **kwargs: False)
    from context_cite import utils as ccu

    ids = mi.input_ids.tolist()
    prompt_ids, response_ids = ids[:mi.gen_start], ids[mi.gen_start:]
    if masks is not None:
        monkeypatch.setattr(ccu, "_create_mask", lambda num_sources, alpha_, seed: masks[seed])
        n_masks = len(masks)

    def get_prompt_ids(mask):
        gone = {p for j in np.flatnonzero(~mask) for p in dropped_tokens[j]}
        return [t for i, t in enumerate(prompt_ids) if i not in gone]

    return ccu.get_masks_and_logit_probs(model, tok, n_masks, len(dropped_tokens), get_prompt_ids, response_ids,
                                         keep_prob, 1)
