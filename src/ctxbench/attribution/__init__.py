"""Attribution engine: IFR (per-token, span, multi-hop), baselines, token views and traces.

    from ctxbench.attribution import build_attributor, views
    res = build_attributor("ifr_multi_hop_both", hops=1).attribute(model, tok, model_input, sink_span, thinking_span)
    w = views.seq(res.matrix, res.P)[:res.P]
"""

from ctxbench.attribution.base import (AttributionResult, Attributor, available_methods, build_attributor,
                                       is_stop_text, stop_mask)
from ctxbench.attribution import baselines as _baselines  # noqa: F401  (registers the baselines)
from ctxbench.attribution import multi_hop as _multi_hop  # noqa: F401  (registers the multi-hop methods)
from ctxbench.attribution import views
from ctxbench.attribution.capture import Capture, UnsupportedModelError, adapter_for, capture
from ctxbench.attribution.ifr import IFRConfig, per_token_ifr, reconstruct_x_mid, span_ifr
from ctxbench.attribution.traces import load_trace, save_trace

__all__ = ["AttributionResult", "Attributor", "available_methods", "build_attributor", "is_stop_text", "stop_mask",
           "views", "Capture", "UnsupportedModelError", "adapter_for", "capture", "IFRConfig", "per_token_ifr",
           "reconstruct_x_mid", "span_ifr", "load_trace", "save_trace"]
