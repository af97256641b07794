"""kit_hf's launcher and OEA hook, the parts that need neither torch nor transformers: the version check,
the knob's strict parsing, the launcher's own options, the served-name symlink, and the decode-step
classification of continuous-batching rows."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hf_helpers import ROOT
from kit_hf import oea_patch, serve


def test_version_check_names_expected_and_found() -> None:
    serve.check_version(serve.PINNED)
    with pytest.raises(serve.LaunchError) as e:
        serve.check_version("5.17.0")
    assert "5.24.0" in str(e.value) and "5.17.0" in str(e.value)
    with pytest.raises(serve.LaunchError, match="not installed"):
        serve.check_version(None)


def test_the_pin_matches_the_package_and_the_makefile() -> None:
    pyproject = (ROOT / "images" / "transformers" / "pyproject.toml").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert f'"transformers[serving]=={serve.PINNED}"' in pyproject
    assert f"transformers[serving]=={serve.PINNED}" in makefile


def test_launcher_refuses_another_transformers(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(serve, "installed_version", lambda: "5.17.0")
    for k, v in serve.OFFLINE_ENV.items():
        monkeypatch.setenv(k, v)  # main() sets them for the server process; the test's env stays as it was
    assert serve.main(["/nonexistent", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs transformers 5.24.0" in err and "5.17.0 is installed" in err


@pytest.mark.parametrize("raw, want", [(None, None), ("1", 1), (" 3 ", 3), ("8", 8)])
def test_knob_parses(raw: str | None, want: int | None) -> None:
    assert oea_patch.parse_k0(raw) == want


@pytest.mark.parametrize("raw", ["", "0", "-1", "two", "2.0", "0x2", "1e1"])
def test_knob_is_strict(raw: str) -> None:
    with pytest.raises(oea_patch.OeaConfigError, match="KIT_OEA_K0"):
        oea_patch.parse_k0(raw)


def test_k0_must_not_exceed_top_k() -> None:
    oea_patch.check_k0(4, 4)
    with pytest.raises(oea_patch.OeaConfigError, match=r"\[1, 4\]"):
        oea_patch.check_k0(5, 4)


def test_launcher_refuses_a_bad_knob_before_serving(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(serve, "installed_version", lambda: serve.PINNED)
    for k, v in serve.OFFLINE_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(oea_patch.KNOB, "zero")
    assert serve.main(["/nonexistent"]) == 2
    assert "KIT_OEA_K0='zero' is not an integer" in capsys.readouterr().err


def test_own_options_are_taken_out_and_the_rest_passed_on() -> None:
    o = serve.parse(["/m", "--experts-implementation", "batched_mm", "--continuous-batching", "--served-name",
                     "tiny", "--port", "9"])
    assert (o.experts, o.served_name, o.rest) == ("batched_mm", "tiny", ["/m", "--continuous-batching", "--port", "9"])
    with pytest.raises(SystemExit):
        serve.parse(["/m", "--experts-implementation", "fast"])


def test_served_name_is_a_symlink_in_a_private_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "weights"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the private directory lands in tmp_path
    with pytest.raises(serve.LaunchError, match="model directory first"):
        serve.serve_as(["--device", "cpu", str(model)], "kit-tiny")
    rest, home = serve.serve_as([str(model), "--device", "cpu", "--port", "9"], "kit-tiny")
    assert rest == ["kit-tiny", "--device", "cpu", "--port", "9"]
    assert Path.cwd() == home != tmp_path and Path("kit-tiny").resolve() == model.resolve()
    assert os.path.exists("kit-tiny")  # what transformers' process_model_name checks to keep the name as given
    with pytest.raises(serve.LaunchError, match="no model directory"):
        serve.serve_as([str(tmp_path)], "x")
    with pytest.raises(serve.LaunchError, match="plain name"):
        serve.serve_as([str(model)], "a/b")


# --------------------------------------------------------------------------- decode detection


def test_decode_rows_are_one_token_after_the_prompt() -> None:
    rows = [
        (1, 40, 40),   # the first decode step after a 40-token prompt: decode
        (1, 57, 40),   # a later decode step: decode
        (40, 0, 40),   # a whole prompt: prefill
        (1, 39, 40),   # a prompt's last token alone (chunked prefill): prefill
        (16, 24, 40),  # a later prefill chunk: prefill
        (1, 0, 1),     # a one-token prompt: prefill
        (1, 1, 1),     # ... and its first decode step
        (3, 61, 40),   # several tokens after the prompt (not something the scheduler makes): not decode
    ]
    assert oea_patch.decode_rows(rows) == [True, True, False, False, False, False, True, False]


def test_batch_mode_per_batch() -> None:
    decode = oea_patch.classify([(1, 40, 40), (1, 50, 40)])
    prefill = oea_patch.classify([(30, 0, 30), (10, 0, 10)])
    mixed = oea_patch.classify([(1, 40, 40), (30, 0, 30), (1, 70, 40), (5, 10, 15)])
    assert mixed.starts == (0, 1, 31, 32) and mixed.tokens == 37
    assert oea_patch.batch_mode(decode, graphed=False, block_table=False) == "all"
    assert oea_patch.batch_mode(prefill, graphed=False, block_table=False) == "off"
    assert oea_patch.batch_mode(None, graphed=False, block_table=False) == "off"
    assert oea_patch.batch_mode(mixed, graphed=False, block_table=False) == [0, 31]  # the decode tokens only


def test_batch_mode_under_cuda_graphs_follows_the_graph_key() -> None:
    """A replayed graph runs no Python: the decode fast path is always OEA, a graphed varlen batch never."""
    mixed = oea_patch.classify([(1, 40, 40), (30, 0, 30)])
    decode = oea_patch.classify([(1, 40, 40)])
    assert oea_patch.batch_mode(mixed, graphed=True, block_table=False) == "off"
    assert oea_patch.batch_mode(decode, graphed=True, block_table=False) == "off"
    assert oea_patch.batch_mode(decode, graphed=True, block_table=True) == "all"
