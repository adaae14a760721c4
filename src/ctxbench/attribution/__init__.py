"""Attribution engine: IFR (per-token, span, multi-hop), baselines, token views and traces.

    from ctxbench.attribution import MultiHopBothAttributor, views
    res = MultiHopBothAttributor(hops=1).attribute(model, tok, model_input, sink_span, thinking_span)
    w = views.seq(res.matrix, res.P)[:res.P]

Methods and their parameters: docs/attribution.md. In a run, each is the ``_target_`` of
``conf/attribution/<name>.yaml``.
"""

from ctxbench.attribution.base import AttributionResult, Attributor, is_stop_text, stop_mask
from ctxbench.attribution import views
from ctxbench.attribution.attnlrp import AttnLRPAttributor, FTAttnLRPAttributor
from ctxbench.attribution.baselines import (AttentionAttributor, InputXGradientAttributor,
                                            IntegratedGradientsAttributor, RandomAttributor)
from ctxbench.attribution.capture import Capture, capture
from ctxbench.attribution.families import UnsupportedModelError, adapter_for
from ctxbench.attribution.context_cite import ContextCiteAttributor
from ctxbench.attribution.controls import CopyMatchAttributor, PositionAttributor
from ctxbench.attribution.ifr import (AllPositionsIFRAttributor, IFRConfig, SpanIFRAttributor, per_token_ifr,
                                      reconstruct_x_mid, span_ifr)
from ctxbench.attribution.multi_hop import MultiHopBothAttributor, MultiHopIFRAttributor
from ctxbench.attribution.perturbation import PerturbationAttributor
from ctxbench.attribution.traces import load_trace, save_trace

__all__ = ["AttributionResult", "Attributor", "is_stop_text", "stop_mask", "views", "AttentionAttributor",
           "InputXGradientAttributor", "IntegratedGradientsAttributor", "RandomAttributor", "Capture",
           "UnsupportedModelError", "adapter_for", "capture", "AllPositionsIFRAttributor", "IFRConfig",
           "SpanIFRAttributor", "per_token_ifr", "reconstruct_x_mid", "span_ifr", "MultiHopBothAttributor",
           "MultiHopIFRAttributor", "load_trace", "save_trace", "AttnLRPAttributor", "FTAttnLRPAttributor",
           "ContextCiteAttributor", "PerturbationAttributor", "CopyMatchAttributor", "PositionAttributor"]
