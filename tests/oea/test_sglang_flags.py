"""Every sglang flag of experiments/oea.yaml, checked against sglang 0.5.23's own argument definitions.

The options come from the PyPI wheel's source (sglang_args.py parses server_args.py and the argument fields
with ``ast``: no list typed here), so a renamed or removed flag, an abbreviation sglang only accepts by argparse
prefix matching (``--tp``), or a backend name outside a flag's choices fails here before a GPU machine would
start a server for an hour. The AST parse is itself checked against sglang's own parser builder where msgspec
(sglang's dependency) is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from oea_helpers import ROOT, SGLANG_REAL, extract_arg_sources, need_msgspec
from sglang_args import Option, check_argv, options_from_wheel, sglang_argv

from kit.manifest import load_manifest

OEA = ROOT / "experiments" / "oea.yaml"
# The kernel paths oea.yaml pins for SM120 (what sglang 0.5.23's `auto` resolves to there; docs/oea.md).
PINNED = {
    "--tp-size": "8",
    "--ep-size": "1",
    "--moe-a2a-backend": "none",
    "--moe-runner-backend": "flashinfer_cutlass",
    "--fp4-gemm-backend": "flashinfer_cutlass",
    "--attention-backend": "dsa",
    "--dsa-prefill-backend": "flashinfer_sparse_mla",
    "--dsa-decode-backend": "flashinfer_sparse_mla",
    "--max-running-requests": "128",
    "--cuda-graph-max-bs-decode": "128",
}


@pytest.fixture(scope="session")
def options(sglang_wheel: Path) -> dict[str, Option]:
    return options_from_wheel(sglang_wheel)


def arm_argvs() -> dict[str, list[str]]:
    m = load_manifest(OEA).manifest
    return {a.name: sglang_argv([*(a.command or m.server.command), *a.args]) for a in m.arms}


def test_the_wheel_yields_sglangs_options(options: dict[str, Option]) -> None:
    """Not vacuous: hundreds of options, with spellings, switches, choices and aliases as sglang declares them."""
    assert len(options) > 400
    assert options["--tensor-parallel-size"] is options["--tp-size"]
    assert options["--ep"] is options["--ep-size"]
    assert options["--disable-cuda-graph-padding"].values == "none"
    assert options["--cuda-graph-bs-decode"].values == "many"
    assert "flashinfer_cutlass" in (options["--moe-runner-backend"].choices or ())
    assert options["--fp4-gemm-backend"].field == "fp4_gemm_runner_backend"  # cli_name differs from the field
    assert "--enable-dp-attention" in options  # registered by add_argument (deprecated spelling)
    assert "--disable-cuda-graph" in options and "--tp" not in options


def test_every_flag_of_every_arm_of_oea_yaml_is_an_sglang_option(options: dict[str, Option]) -> None:
    argvs = arm_argvs()
    assert list(argvs) == ["baseline", "oea", "oea-k8"]
    for arm, argv in argvs.items():
        assert check_argv(argv, options) == [], arm
        flags = [t for t in argv if t.startswith("--")]
        assert len(flags) >= 20, (arm, flags)
        for flag, value in PINNED.items():
            assert argv[argv.index(flag) + 1] == value, (arm, flag)
    assert len({tuple(a) for a in argvs.values()}) == 1  # the arms differ by image and env only


def test_the_expert_pass_server_is_an_arm_plus_sglang_recorder_flags(options: dict[str, Option]) -> None:
    """expert_pass.server_args (the untimed recorder server, kit.experiment.expert_pass) on every arm's command."""
    m = load_manifest(OEA).manifest
    assert m.expert_pass is not None
    extra = m.expert_pass.server_args
    assert extra[extra.index("--expert-distribution-recorder-mode") + 1] == "per_pass"
    assert "per_pass" in (options["--expert-distribution-recorder-mode"].choices or ())
    assert options["--chunked-prefill-size"].field == "chunked_prefill_size"
    assert m.expert_pass.dump_env == "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"
    for arm, argv in arm_argvs().items():
        assert check_argv([*argv, *extra], options) == [], arm
        assert "--expert-distribution-recorder-mode" not in argv  # never in the timed cells' servers


def test_the_check_refuses_what_sglang_would_not_parse_or_would_guess(options: dict[str, Option]) -> None:
    """The spellings the seed's first oea.yaml and older recipes used, and values outside the choices."""
    argv = ["--tp", "8", "--cuda-graph-max-bs", "256", "--nsa-decode-backend", "trtllm",
            "--moe-runner-backend", "flashinfer_trtllm_bogus", "--disable-radix-cache", "true", "--port"]
    problems = check_argv(argv, options)
    assert problems[0].startswith("--tp: not an option of sglang 0.5.23 (an abbreviation of ")
    assert "--tp-size" in problems[0] and "spell it out" in problems[0]
    assert problems[1].startswith("--cuda-graph-max-bs: not an option of sglang 0.5.23 (an abbreviation of")
    assert problems[2] == "--nsa-decode-backend: not an option of sglang 0.5.23"
    assert problems[3].startswith("--moe-runner-backend flashinfer_trtllm_bogus: not one of sglang 0.5.23's choices")
    assert problems[4].startswith("'true' is not a flag")
    assert problems[5] == "--port needs a value"
    assert len(problems) == 6
    assert check_argv(["--disable-radix-cache=1"], options) == [
        "--disable-radix-cache is a switch and takes no value (got '1')"]
    assert check_argv(["--cuda-graph-bs-decode", "1", "2", "4", "--port", "{port}"], options) == []


def test_the_ast_parse_matches_sglangs_own_parser_builder(sglang_wheel: Path, tmp_path: Path) -> None:
    need_msgspec()
    site = extract_arg_sources(sglang_wheel, tmp_path / "site")
    proc = subprocess.run([sys.executable, str(SGLANG_REAL), str(site), str(sglang_wheel), "options"], capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["real"] > 400
    assert out["only_real"] == [] and out["only_ours"] == [] and out["differ"] == {}, out
