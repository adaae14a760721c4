"""A logits processor that keeps local generation in the sampling stage's answer format (``hf`` generator's
``box_on_stop``; docs/sampling.md#hf).

Small models often write the final sentence and stop without ``\\box{}`` however many worked examples they see
(SmolLM2-135M: docs/sampling.md#measured). The guard only acts when the model would stop, or once the box is done:

- the model would stop (an EOS id has the highest score) before any box was opened: the opening ``\\n\\box{`` is
  forced instead, token by token, and the model writes the box content itself;
- it would stop inside an open box: the closing ``}`` is forced;
- the last box is closed: EOS is forced, so nothing follows the box.

Every other token is the model's own choice; the forced tokens are only box markup, which the format check strips
from the target (``thinking + "\\n" + answer``), so attribution explains model-written tokens only. Greedy and sampled
decoding alike: the rule reads the processed scores, before sampling.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ctxbench.boxed import find_boxes

OPENING = "\n\\box{"
CLOSING = "}"


class BoxGuard:
    """``prompt_width``: the columns of the (left-padded) prompt; ``stops``: the EOS ids. One instance per batch."""

    def __init__(self, tokenizer, prompt_width: int, stops: Sequence[int]):
        self.tok = tokenizer
        self.width = prompt_width
        self.stops = list(stops)
        self.opening = tokenizer(OPENING, add_special_tokens=False)["input_ids"]
        self.closing = tokenizer(CLOSING, add_special_tokens=False)["input_ids"]
        self.queue: dict[int, list[int]] = {}
        self.forced: dict[int, list[str]] = {}  # row -> what was forced, in order (Generation.forced)

    def _force(self, scores: torch.Tensor, row: int, token: int) -> None:
        scores[row] = float("-inf")
        scores[row, token] = 0.0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        for row in range(scores.shape[0]):
            if self.queue.get(row):
                self._force(scores, row, self.queue[row].pop(0))
                continue
            new = input_ids[row, self.width:].tolist()
            if any(t in self.stops for t in new):
                continue  # this row has finished; generate pads it
            boxes = find_boxes(self.tok.decode(new, skip_special_tokens=True))
            if boxes and boxes[-1][2] is not None:
                if int(scores[row].argmax()) not in self.stops:
                    self.forced.setdefault(row, []).append("end_after_box")
                self._force(scores, row, self.stops[0])
            elif int(scores[row].argmax()) in self.stops:
                self.forced.setdefault(row, []).append("close_box" if boxes else "open_box")
                self.queue[row] = list(self.closing if boxes else self.opening)
                self._force(scores, row, self.queue[row].pop(0))
        return scores
