"""kit_oea.guard: the server set-ups the OEA hook refuses (DP attention, all-to-all expert parallelism,
speculative decoding, padded decode graphs), each with an error naming the flag and the fix.

Checked three ways: the refusal rules on their own; the patched ``TopK.__init__`` (the real sglang 0.5.23 source
patched by apply.py) calling them for every layer whose k0 is set; and, where msgspec is installed, sglang's own
argument parser and ``runtime_context`` config bags (real modules, CPU interpreter) carrying oea.yaml's command
line and the refused flags to the guard's reads.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from kit_oea.guard import OeaSetupError, ServerSetup, check, refusals
from oea_helpers import ROOT, SGLANG_REAL, TOPK, extract_arg_sources, need_msgspec, run_apply
from sglang_args import sglang_argv

from kit.manifest import load_manifest

OK = ServerSetup(attn_dp_size=1, moe_a2a_backend="none", speculative_algorithm=None, disable_cuda_graph_padding=True)
# Each refused setting, the flag its message must name, and the fix it must give.
REFUSED = [
    ({"attn_dp_size": 2}, "--attn-dp-size 2", "--attn-dp-size 1"),
    ({"moe_a2a_backend": "deepep"}, "--moe-a2a-backend deepep", "use --moe-a2a-backend none"),
    ({"speculative_algorithm": "EAGLE"}, "--speculative-algorithm EAGLE", "remove --speculative-algorithm"),
    ({"disable_cuda_graph_padding": False}, "--disable-cuda-graph-padding is not set",
     "set --disable-cuda-graph-padding in every arm"),
]


def test_the_tp_only_unpadded_setup_passes() -> None:
    assert refusals(OK) == []
    check(OK, 4)


@pytest.mark.parametrize(("change", "flag", "fix"), REFUSED)
def test_each_refusal_names_its_flag_and_fix(change: dict[str, Any], flag: str, fix: str) -> None:
    with pytest.raises(OeaSetupError) as info:
        check(ServerSetup(**{**vars(OK), **change}), 4)
    message = str(info.value)
    assert message.startswith("SGLANG_OEA_K0=4 (kit OEA patch) refuses this server configuration: ")
    assert flag in message and fix in message
    assert len(refusals(ServerSetup(**{**vars(OK), **change}))) == 1


def test_every_refusal_is_named_at_once() -> None:
    bad = ServerSetup(attn_dp_size=4, moe_a2a_backend="mooncake", speculative_algorithm="NEXTN",
                      disable_cuda_graph_padding=False)
    assert [line.split(" (")[0] for line in refusals(bad)] == [
        "DP attention", "all-to-all expert parallelism", "speculative decoding", "padded decode CUDA graphs"]


def test_the_patched_topk_init_runs_the_guard_for_every_oea_layer(sglang_tree: Path) -> None:
    proc = run_apply("--root", sglang_tree, "--marker", sglang_tree / "PATCHED")
    assert proc.returncode == 0, proc.stderr
    tree = ast.parse((sglang_tree / TOPK).read_text(encoding="utf-8"))
    topk = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "TopK")
    init = next(n for n in topk.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    # inside `if not self.is_draft and envs.SGLANG_OEA_K0.is_set():`, after layer_k0, under `if ...oea_k0:`
    gate = next(n for n in init.body if isinstance(n, ast.If) and "is_draft" in ast.unparse(n.test))
    assert ast.unparse(gate.test) == "not self.is_draft and envs.SGLANG_OEA_K0.is_set()"
    texts = [ast.unparse(s) for s in gate.body]
    k0_at = next(i for i, t in enumerate(texts) if t == "self.topk_config.oea_k0 = layer_k0(self.topk_config)")
    guarded = gate.body[k0_at + 1]
    assert isinstance(guarded, ast.If) and ast.unparse(guarded.test) == "self.topk_config.oea_k0"
    assert [ast.unparse(s) for s in guarded.body] == [
        "from kit_oea.guard import refuse_unsupported_setup",
        "refuse_unsupported_setup(self.topk_config.oea_k0)"]


def test_the_guard_reads_fields_sglang_publishes_where_sglang_reads_them(sglang_wheel: Path) -> None:
    """Each read of setup_from_sglang is a field of the namespace class with that path in the wheel, and
    sglang's own code reads it through the same accessor."""
    reads = {"attn_dp_size": ("parallel", "get_parallel().attn_dp_size"),
             "moe_a2a_backend": ("exec.moe", "get_exec().moe.moe_a2a_backend"),
             "disable_cuda_graph_padding": ("exec.graph", "get_exec().graph.disable_cuda_graph_padding"),
             "speculative_algorithm": ("spec", "get_spec().speculative_algorithm")}
    guard_src = (ROOT / "images/oea/kit_oea/guard.py").read_text()
    with zipfile.ZipFile(sglang_wheel) as zf:
        namespaces: dict[str, set[str]] = {}
        for name in zf.namelist():
            if name.startswith("sglang/srt/arg_groups/fields/") and name.endswith(".py"):
                for cls in ast.parse(zf.read(name)).body:
                    if not isinstance(cls, ast.ClassDef):
                        continue
                    path = next((ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)
                                 and ast.unparse(s.targets[0]) == "_NS_PATH"), None)
                    fields = {s.target.id for s in cls.body
                              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                    if path:
                        namespaces.setdefault(path, set()).update(fields)
        sources = "\n".join(zf.read(n).decode("utf-8", "replace") for n in zf.namelist()
                            if n.startswith("sglang/srt/") and n.endswith(".py") and "arg_groups" not in n)
    for field, (path, accessor) in reads.items():
        assert field in namespaces[path], (field, path)
        assert accessor in sources, accessor
        assert accessor in guard_src


def _oea_argv() -> list[str]:
    m = load_manifest(ROOT / "experiments" / "oea.yaml").manifest
    values = {"{model_path}": "/model", "{served_name}": "glm", "{port}": "30000"}
    return [values.get(t, t) for t in sglang_argv(m.server.command)]


CASES: dict[str, tuple[list[str], str | None]] = {  # extra arguments, the flag the refusal must name
    "oea.yaml as it is": ([], None),
    "attn dp": (["--attn-dp-size", "2"], "--attn-dp-size 2"),
    "attn dp, long alias": (["--attention-data-parallel-size", "8"], "--attn-dp-size 8"),
    "a2a": (["--moe-a2a-backend", "deepep"], "--moe-a2a-backend deepep"),
    "spec": (["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"], "--speculative-algorithm EAGLE"),
}


@pytest.fixture(scope="module")
def through_real_modules(sglang_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's result from one run of sglang_real.py (sglang's parser and runtime_context, real modules)."""
    need_msgspec()
    site = extract_arg_sources(sglang_wheel, tmp_path_factory.mktemp("sglang-site"))
    argvs = [[*_oea_argv(), *extra] for extra, _ in CASES.values()]
    argvs.append([t for t in _oea_argv() if t != "--disable-cuda-graph-padding"])
    proc = subprocess.run([sys.executable, str(SGLANG_REAL), str(site), str(sglang_wheel), "guard", "4",
                           json.dumps(argvs)], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    return dict(zip([*CASES, "padding on"], results, strict=True))


def test_oea_yaml_passes_the_guard_through_sglangs_real_modules(through_real_modules: dict[str, Any]) -> None:
    assert through_real_modules["oea.yaml as it is"] == {"refused": None, "setup": vars(OK)}


@pytest.mark.parametrize("case", [c for c, (_, flag) in CASES.items() if flag])
def test_each_refused_flag_reaches_the_guard_through_sglangs_real_modules(
        through_real_modules: dict[str, Any], case: str) -> None:
    out = through_real_modules[case]
    assert out["refused"] is not None and str(CASES[case][1]) in out["refused"]
    assert len(refusals(ServerSetup(**out["setup"]))) == 1  # that flag alone: the rest of oea.yaml passes


def test_padding_left_on_is_refused_through_sglangs_real_modules(through_real_modules: dict[str, Any]) -> None:
    out = through_real_modules["padding on"]
    assert out["setup"]["disable_cuda_graph_padding"] is False
    assert "--disable-cuda-graph-padding is not set" in out["refused"]
