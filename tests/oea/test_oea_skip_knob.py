"""KIT_OEA_SKIP_SLACK (and SGLANG_OEA_K0) values that would turn an OEA arm silently into the baseline, or that
Python's int() reads although no one meant a number, are refused with an error naming the knob.

With slack >= n - k the threshold ``skip_at = n - slack`` is <= k: the union of top-k0 of any batch with one valid
row already holds k0 experts and one token's plain top-k holds k, so (nearly) every batch skips and the "OEA" arm
routes exactly as plain top-k. ``layer_k0`` refuses that at model load where the layer's expert count is known
(its noaux_tc correction bias), and every forward pass refuses it where it is not (sglang builds TopK without it).
Found in review (tests/review, strict xfail until fixed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from kit_oea import oea  # noqa: E402

N, K, K0 = 64, 8, 3


def _config(bias: bool = True) -> SimpleNamespace:
    return SimpleNamespace(layer_id=3, top_k=K, num_shared_topk_slots=0, custom_routing_function=None,
                           scoring_func="softmax", sqrtsoftplus_log1p=False, use_grouped_topk=False,
                           num_expert_group=None, topk_group=None,
                           correction_bias=torch.zeros(N) if bias else None)


def _plain(gen: torch.Generator, m: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = torch.randn(m, N, generator=gen)
    ids = torch.topk(torch.softmax(logits, 1), K).indices.to(torch.int32)
    w = torch.softmax(logits, 1).gather(1, ids.long())
    return logits, ids, w / w.sum(1, keepdim=True)


def test_a_slack_of_n_minus_k0_would_skip_every_batch() -> None:
    """The mechanism the refusal prevents: skip_at(64, '61') = 3 = k0, so even one row is plain routing (the
    threshold itself, without k, is still what the hook computes; with k it is refused)."""
    at = oea.skip_at(N, str(N - K0))
    assert at == K0
    logits, ids, w = _plain(torch.Generator().manual_seed(0))
    got_ids, got_w = ids.clone(), w.clone()
    oea.reroute_torch_(got_ids, got_w, logits, k0=K0, k=K, scoring_func="softmax", correction_bias=None,
                       renormalize=True, routed_scaling_factor=None, num_token_non_padded=None, skip_at=at)
    assert torch.equal(got_ids, ids) and torch.equal(got_w, w)  # OEA did nothing
    off_ids, off_w = ids.clone(), w.clone()
    oea.reroute_torch_(off_ids, off_w, logits, k0=K0, k=K, scoring_func="softmax", correction_bias=None,
                       renormalize=True, routed_scaling_factor=None, num_token_non_padded=None, skip_at=None)
    assert not torch.equal(off_ids, ids)  # where OEA would have rerouted this row
    with pytest.raises(ValueError, match="KIT_OEA_SKIP_SLACK=61: the skip threshold n - slack = 3 is not above"):
        oea.skip_at(N, str(N - K0), k=K)


@pytest.mark.parametrize("slack", [str(N - K0), str(N - K), "1000000"])
def test_startup_refuses_a_slack_that_disables_oea(monkeypatch: pytest.MonkeyPatch, slack: str) -> None:
    monkeypatch.setenv(oea.SKIP_KNOB, slack)
    with pytest.raises(ValueError, match=r"SGLANG_OEA_K0=3 \(kit OEA patch\), MoE layer 3: KIT_OEA_SKIP_SLACK="):
        oea.layer_k0(_config(), str(K0))


def test_the_largest_slack_that_keeps_oea_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """n - k - 1 = 55: threshold 9 > k = 8, accepted at load; the default (unset) and 'off' too."""
    for slack in (str(N - K - 1), "", "off", "0"):
        monkeypatch.setenv(oea.SKIP_KNOB, slack)
        assert oea.layer_k0(_config(), str(K0)) == K0
    assert oea.skip_at(N, str(N - K - 1), k=K) == K + 1


def test_without_the_expert_count_at_load_the_first_forward_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A softmax router without a correction bias: TopK does not know n at load, so load checks the text only and
    the hook's first call (every call) refuses the slack, before touching the tensors."""
    monkeypatch.setenv(oea.SKIP_KNOB, str(N - K0))
    assert oea.layer_k0(_config(bias=False), str(K0)) == K0
    logits, ids, w = _plain(torch.Generator().manual_seed(1), m=4)
    before = ids.clone()
    with pytest.raises(ValueError, match="KIT_OEA_SKIP_SLACK=61"):
        oea.oea_reroute_(ids, w, logits, k0=K0, k=K, scoring_func="softmax", correction_bias=None,
                         renormalize=True, routed_scaling_factor=None, num_token_non_padded=None)
    assert torch.equal(ids, before)


@pytest.mark.parametrize("text", ["٣", "３", "1_0", "+2", "0x4", " 4 5", "1e3", "4.0", "9" * 10])
def test_only_ascii_digits_are_numbers(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """int() takes Arabic-Indic and full-width digits, underscores and a plus sign; the knobs do not."""
    with pytest.raises(ValueError, match=r"KIT_OEA_SKIP_SLACK=.* is not an integer >= 0 in ASCII digits"):
        oea.parse_skip_slack(text)
    with pytest.raises(ValueError, match=r"SGLANG_OEA_K0=.* is not an integer in ASCII digits"):
        oea.parse_k0(text)
    monkeypatch.setenv(oea.SKIP_KNOB, text)
    with pytest.raises(ValueError, match="MoE layer 3: KIT_OEA_SKIP_SLACK"):
        oea.layer_k0(_config(), str(K0))
