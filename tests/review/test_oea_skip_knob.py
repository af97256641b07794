"""Review: KIT_OEA_SKIP_SLACK values that turn an OEA arm silently into the baseline pass the startup check.

With slack >= n - k0 the threshold ``skip_at = n - slack`` is <= k0, and the union of top-k0 of any batch with
one valid row already holds k0 experts: every batch skips, so the "OEA" arm routes exactly as plain top-k,
which is the failure ``layer_k0`` exists to prevent ("fails at startup instead of silently running the
baseline"). Nothing records the knob in the bundle either (grep kit/ for KIT_OEA_SKIP_SLACK: no hit).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from kit_oea import oea  # noqa: E402

N, K, K0 = 64, 8, 3


def _config() -> SimpleNamespace:
    return SimpleNamespace(layer_id=3, top_k=K, num_shared_topk_slots=0, custom_routing_function=None,
                           scoring_func="softmax", sqrtsoftplus_log1p=False, use_grouped_topk=False,
                           num_expert_group=None, topk_group=None)


def test_a_slack_of_n_minus_k0_skips_every_batch() -> None:
    """Holds today (the mechanism): skip_at(64, '61') = 3 = k0, so even one row is plain routing."""
    at = oea.skip_at(N, str(N - K0))
    assert at == K0
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(1, N, generator=gen)
    ids = torch.topk(torch.softmax(logits, 1), K).indices.to(torch.int32)
    w = torch.softmax(logits, 1).gather(1, ids.long())
    w = w / w.sum(1, keepdim=True)
    got_ids, got_w = ids.clone(), w.clone()
    oea.reroute_torch_(got_ids, got_w, logits, k0=K0, k=K, scoring_func="softmax", correction_bias=None,
                       renormalize=True, routed_scaling_factor=None, num_token_non_padded=None, skip_at=at)
    assert torch.equal(got_ids, ids) and torch.equal(got_w, w)  # OEA did nothing
    off_ids, off_w = ids.clone(), w.clone()
    oea.reroute_torch_(off_ids, off_w, logits, k0=K0, k=K, scoring_func="softmax", correction_bias=None,
                       renormalize=True, routed_scaling_factor=None, num_token_non_padded=None, skip_at=None)
    assert not torch.equal(off_ids, ids)  # where OEA would have rerouted this row


@pytest.mark.xfail(strict=True, reason="review: layer_k0 accepts a slack that disables OEA on every batch")
@pytest.mark.parametrize("slack", [str(N - K0), "1000000"])
def test_startup_refuses_a_slack_that_disables_oea(monkeypatch: pytest.MonkeyPatch, slack: str) -> None:
    monkeypatch.setenv(oea.SKIP_KNOB, slack)
    with pytest.raises(ValueError, match="KIT_OEA_SKIP_SLACK"):
        oea.layer_k0(_config(), str(K0))
