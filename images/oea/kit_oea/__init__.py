"""kit's Opportunistic Expert Activation hook for sglang (installed into the OEA image by ``apply.py``)."""

from kit_oea.oea import KNOB, SUPPORTED_SCORING, layer_k0, oea_reroute_, oea_route_torch, parse_k0

__all__ = ["KNOB", "SUPPORTED_SCORING", "layer_k0", "oea_reroute_", "oea_route_torch", "parse_k0"]
