"""images/oea/apply.py against the real sglang 0.5.23 sources (the PyPI wheel, cached in ~/.cache/kit-test/).

The patched sglang cannot run here (no GPU, no triton, no sglang dependencies), so the checks are: the
patch applies, byte-compiles and is recorded; the hook sits where it must in ``select_experts()``, calls
``kit_oea`` with the arguments it takes and only uses names that exist at that point; the patched
``forward_context.py`` (which needs nothing but the standard library) really runs and sets the decode
flag; and every refusal (wrong version, missing anchor, patched twice, syntax error) fails with its
promised message and writes nothing.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from oea_helpers import APPLY, CONTEXT, ENVIRON, HTTP_SERVER, IMAGE_DIR, SGLANG_VERSION, TOPK, extract_tree, run_apply

PATCHED_FILES = (ENVIRON, CONTEXT, TOPK, HTTP_SERVER)
VERSION_MESSAGE = (
    "kit OEA patch targets sglang 0.5.23; this image has sglang 0.5.22. "
    "Rebuild the patch for that version or pin the baseline to 0.5.23"
)
FC_PROBE = Path(__file__).with_name("fc_probe.py")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(tree: Path) -> dict[str, str]:
    return {rel: sha256(tree / rel) for rel in PATCHED_FILES}


def patch(tree: Path, *extra: str) -> dict[str, Any]:
    proc = run_apply("--root", tree, "--marker", tree / "PATCHED", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads((tree / "PATCHED").read_text(encoding="utf-8"))


def parse(tree: Path, rel: str) -> ast.Module:
    return ast.parse((tree / rel).read_text(encoding="utf-8"), filename=rel)


def find_def(node: ast.AST, name: str) -> Any:
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.ClassDef)) and child.name == name:
            return child
    raise AssertionError(f"{name} not found")


def class_attrs(cls: ast.ClassDef) -> set[str]:
    """Annotated fields, plain assignments and properties/methods of a class body."""
    names: set[str] = set()
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
        elif isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.FunctionDef):
            names.add(stmt.name)
    return names


def calls_to(node: ast.AST, name: str) -> list[ast.Call]:
    found = []
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            func = child.func
            callee = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if callee == name:
                found.append(child)
    return found


def statement_index(body: list[ast.stmt], predicate: Any, what: str) -> int:
    hits = [i for i, stmt in enumerate(body) if predicate(stmt)]
    assert len(hits) == 1, f"{what}: expected one top-level statement, found {len(hits)}"
    return hits[0]


def has_call(stmt: ast.stmt, name: str) -> bool:
    return bool(calls_to(stmt, name))


def oea_hook_statement(select: ast.FunctionDef) -> tuple[int, ast.If]:
    index = statement_index(select.body, lambda s: isinstance(s, ast.If) and has_call(s, "oea_reroute_"), "OEA hook")
    stmt = select.body[index]
    assert isinstance(stmt, ast.If)
    return index, stmt


# ---------------------------------------------------------------- applying to the real sources


def test_patch_applies_compiles_and_is_recorded(sglang_tree: Path) -> None:
    before = snapshot(sglang_tree)
    record = patch(sglang_tree)
    assert record["sglang_version"] == SGLANG_VERSION and record["env_knob"] == "SGLANG_OEA_K0"
    assert set(record["files"]) == set(PATCHED_FILES)
    for rel in PATCHED_FILES:
        info = record["files"][rel]
        assert info["sha256_before"] == before[rel] and info["before_matches_wheel"] is True
        assert info["sha256"] == sha256(sglang_tree / rel) != before[rel]
        compile((sglang_tree / rel).read_text(encoding="utf-8"), rel, "exec")
        assert list((sglang_tree / rel).parent.glob(f"__pycache__/{Path(rel).stem}.*.pyc")), f"{rel} not byte-compiled"
    assert record["kit_oea_sha256"] == {p.name: sha256(p) for p in sorted((IMAGE_DIR / "kit_oea").glob("*.py"))}
    pth = sglang_tree / "kit_oea.pth"
    assert record["pth"] == str(pth) and pth.read_text(encoding="utf-8").strip() == str(IMAGE_DIR.resolve())
    assert record["import_check"] is None, "with --root nothing is imported"


def test_patched_sources_carry_the_knob_field_and_flag(sglang_tree: Path) -> None:
    patch(sglang_tree)
    envs = find_def(parse(sglang_tree, ENVIRON), "Envs")
    knob = [s for s in envs.body if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "SGLANG_OEA_K0"]
    assert len(knob) == 1 and ast.unparse(knob[0].value) == "EnvInt(0)"
    context = parse(sglang_tree, CONTEXT)
    assert "oea_active" in class_attrs(find_def(context, "ForwardContext"))
    assert "_KIT_OEA_ENABLED = envs.SGLANG_OEA_K0.get() != 0" in ast.unparse(context)
    topk = parse(sglang_tree, TOPK)
    config = [s for s in find_def(topk, "TopKConfig").body if isinstance(s, ast.AnnAssign)]
    assert any(ast.unparse(s) == "oea_k0: int = 0" for s in config)


def test_topk_init_forces_standard_output_on_non_draft_layers(sglang_tree: Path) -> None:
    patch(sglang_tree)
    init = find_def(find_def(parse(sglang_tree, TOPK), "TopK"), "__init__")
    source = ast.unparse(init)
    gate = "if not self.is_draft and envs.SGLANG_OEA_K0.is_set():"
    assert gate in source and "self.topk_config.oea_k0 = layer_k0(self.topk_config)" in source
    # top-level statements of __init__ (the guard's `if ...oea_k0:` nested in the gate is test_oea_guard's)
    forced = [s for s in init.body if isinstance(s, ast.If) and ast.unparse(s.test) == "self.topk_config.oea_k0"]
    assert len(forced) == 1
    body = {ast.unparse(s) for s in forced[0].body}
    assert body == {
        "self.topk_config.output_format = TopKOutputFormat.STANDARD",
        "self.topk_config.fused_gate_packed_ids = False",
    }
    # The settings come after the TopKConfig is built (so they are not overwritten) and inside __init__,
    # before bind_runner_backend() runs (which keeps an output format that is already set).
    build = statement_index(init.body, lambda s: has_call(s, "TopKConfig"), "TopKConfig(...)")
    assert build < init.body.index(forced[0])


def test_select_experts_hook_sits_between_router_and_post_processing(sglang_tree: Path) -> None:
    patch(sglang_tree)
    select = find_def(parse(sglang_tree, TOPK), "select_experts")
    hook_at, hook = oea_hook_statement(select)
    body = select.body
    fold = statement_index(
        body, lambda s: isinstance(s, ast.If) and "fold_scale_after_routing" in ast.unparse(s.test), "scale fold"
    )
    simulate = statement_index(
        body, lambda s: isinstance(s, ast.If) and has_call(s, "apply_routing_simulation"), "simulation"
    )
    post = statement_index(body, lambda s: has_call(s, "_post_process_topk_ids"), "_post_process_topk_ids")
    recorder = statement_index(body, lambda s: has_call(s, "on_select_experts"), "recorder")
    assert fold < hook_at < simulate < post < recorder
    assert hook_at == simulate - 1, "the hook goes just before the routing-override block"
    gate = ast.unparse(hook.test)
    for part in (
        "topk_config.oea_k0",
        "not routing_overridden",
        "has_forward_context()",
        "get_forward_context().oea_active",
    ):
        assert part in gate
    assert [ast.unparse(s) for s in hook.body][-1] == "packed_topk = None"


def test_hook_call_matches_kit_oea_signature(sglang_tree: Path) -> None:
    pytest.importorskip("torch", reason="kit_oea.oea imports torch")
    from kit_oea.oea import oea_reroute_

    patch(sglang_tree)
    _, hook = oea_hook_statement(find_def(parse(sglang_tree, TOPK), "select_experts"))
    (call,) = calls_to(hook, "oea_reroute_")
    params = inspect.signature(oea_reroute_).parameters.values()
    positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keyword_only = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert [ast.unparse(a) for a in call.args] == positional == ["topk_ids", "topk_weights", "router_logits"]
    assert {kw.arg for kw in call.keywords} == keyword_only
    assert ast.unparse(next(kw.value for kw in call.keywords if kw.arg == "k")) == "num_routed_topk"


def test_prelaunch_sits_before_the_router_and_the_hook_joins_it(sglang_tree: Path) -> None:
    """The fused hook's first kernel is forked before the router's top-k (after EPLB's input transform, so it
    reads the same logits and bias as the hook), under the hook's own gate (plus no aiter: there the bias
    changes dtype before the router), with the names select_experts() has bound by then, and the hook hands
    its result back (it joins the side stream)."""
    pytest.importorskip("torch", reason="kit_oea.oea imports torch")
    from kit_oea.oea import oea_prelaunch_

    patch(sglang_tree)
    module = parse(sglang_tree, TOPK)
    select = find_def(module, "select_experts")
    body = select.body
    pre_at = statement_index(body, lambda s: isinstance(s, ast.If) and has_call(s, "oea_prelaunch_"), "prelaunch")
    pre = body[pre_at]
    transform = statement_index(body, lambda s: has_call(s, "transform_select_experts_inputs"), "EPLB transform")
    router = statement_index(
        body, lambda s: isinstance(s, ast.If) and "dynamic_expert_bias is not None" in ast.unparse(s.test), "router"
    )
    hook_at, hook = oea_hook_statement(select)
    assert transform < pre_at - 1 < pre_at < router < hook_at
    assert ast.unparse(body[pre_at - 1]) == "_kit_oea_prelaunched = None"
    for part in ("topk_config.oea_k0", "not routing_overridden", "not _use_aiter", "has_forward_context()",
                 "get_forward_context().oea_active"):  # fmt: skip
        assert part in ast.unparse(pre.test)
    (call,) = calls_to(pre, "oea_prelaunch_")
    params = inspect.signature(oea_prelaunch_).parameters.values()
    assert [ast.unparse(a) for a in call.args] == [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert {kw.arg for kw in call.keywords} == {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    known = _module_names(module) | _bound_before(select, pre_at) | set(dir(builtins)) | {"oea_prelaunch_"}
    loaded = {n.id for n in ast.walk(pre) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert loaded - known == set()
    (reroute,) = calls_to(hook, "oea_reroute_")
    assert ast.unparse(next(kw.value for kw in reroute.keywords if kw.arg == "prelaunched")) == "_kit_oea_prelaunched"
    # What both read is the same object at both points: never rebound in between, except the bias's downcast,
    # which sglang does only under aiter (where nothing is prelaunched).
    for stmt in body[pre_at + 1 : hook_at]:
        stored = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        assert not stored & {"router_logits", "num_token_non_padded"}, ast.unparse(stmt)[:200]
        if "correction_bias" in stored:
            assert isinstance(stmt, ast.If) and isinstance(stmt.test, ast.BoolOp), ast.unparse(stmt)[:200]
            assert isinstance(stmt.test.op, ast.And) and ast.unparse(stmt.test.values[0]) == "_use_aiter"


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for stmt in ast.walk(tree):
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt in tree.body:
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.Assign) and stmt in tree.body:
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return names


def _bound_before(select: ast.FunctionDef, upto: int) -> set[str]:
    args = select.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    for stmt in select.body[:upto]:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def test_hook_uses_only_names_bound_at_that_point(sglang_tree: Path) -> None:
    """What a runtime test would catch first: a name the hook reads that select_experts() does not have."""
    patch(sglang_tree)
    module = parse(sglang_tree, TOPK)
    select = find_def(module, "select_experts")
    hook_at, hook = oea_hook_statement(select)
    known = _module_names(module) | _bound_before(select, hook_at) | set(dir(builtins)) | {"oea_reroute_"}
    loaded = {n.id for n in ast.walk(hook) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert loaded - known == set()
    assert {"num_routed_topk", "correction_bias", "packed_topk", "routing_overridden"} <= _bound_before(select, hook_at)


def test_kit_oea_reads_only_fields_sglang_has(sglang_tree: Path) -> None:
    """layer_k0() takes the real TopKConfig; every attribute it reads must exist there."""
    patch(sglang_tree)
    topk = parse(sglang_tree, TOPK)
    fields = class_attrs(find_def(topk, "TopKConfig"))
    oea = ast.parse((IMAGE_DIR / "kit_oea" / "oea.py").read_text(encoding="utf-8"))
    read = {
        n.attr
        for n in ast.walk(find_def(oea, "layer_k0"))
        if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "topk_config"
    }
    read |= {
        c.args[1].value
        for c in calls_to(find_def(oea, "layer_k0"), "getattr")
        if ast.unparse(c.args[0]) == "topk_config" and isinstance(c.args[1], ast.Constant)
    }
    assert read and read <= fields, read - fields
    assert "oea_active" in class_attrs(find_def(parse(sglang_tree, CONTEXT), "ForwardContext"))


def run_probe(tree: Path, knob: str | None) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", **({"SGLANG_OEA_K0": knob} if knob is not None else {})}
    proc = subprocess.run(
        [sys.executable, str(FC_PROBE), str(tree)], capture_output=True, text=True, check=False, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_patched_forward_context_sets_the_decode_flag(sglang_tree: Path) -> None:
    patch(sglang_tree)
    out = run_probe(sglang_tree, "4")
    assert out["knob"] == 4 and "oea_active" in out["fields"]
    assert out["decode"] is True
    assert out["decode_nested_fresh"] is True, "a nested scope without a batch (PDmux) inherits the flag"
    assert out["decode_nested_replace"] is True
    assert out["decode_then_extend_batch"] is False
    assert out["extend"] is False and out["extend_nested_fresh"] is False
    assert out["no_batch"] is False and out["restored"] is True


@pytest.mark.parametrize("knob", [None, "0"])
def test_patched_forward_context_is_inert_when_the_knob_is_off(sglang_tree: Path, knob: str | None) -> None:
    patch(sglang_tree)
    out = run_probe(sglang_tree, knob)
    assert out["knob"] == 0
    assert not any(out[key] for key in ("decode", "decode_nested_fresh", "decode_nested_replace", "extend"))


# ---------------------------------------------------------------- refusals


def assert_untouched(tree: Path, before: dict[str, str]) -> None:
    assert snapshot(tree) == before
    assert not (tree / "PATCHED").exists() and not (tree / "kit_oea.pth").exists()


def test_other_version_override_is_refused(sglang_tree: Path) -> None:
    before = snapshot(sglang_tree)
    proc = run_apply("--root", sglang_tree, "--marker", sglang_tree / "PATCHED", "--version", "0.5.22")
    assert proc.returncode == 1 and VERSION_MESSAGE in proc.stderr
    assert_untouched(sglang_tree, before)


def test_tree_claiming_another_version_is_refused(sglang_tree: Path) -> None:
    meta = sglang_tree / f"sglang-{SGLANG_VERSION}.dist-info" / "METADATA"
    meta.write_text(meta.read_text(encoding="utf-8").replace("Version: 0.5.23", "Version: 0.5.22"), encoding="utf-8")
    before = snapshot(sglang_tree)
    proc = run_apply("--root", sglang_tree, "--marker", sglang_tree / "PATCHED")
    assert proc.returncode == 1 and VERSION_MESSAGE in proc.stderr
    assert_untouched(sglang_tree, before)


def test_version_falls_back_to_version_file(sglang_tree: Path) -> None:
    (sglang_tree / f"sglang-{SGLANG_VERSION}.dist-info" / "METADATA").unlink()
    assert patch(sglang_tree)["sglang_version"] == SGLANG_VERSION


def _edits(apply_mod: ModuleType) -> list[tuple[str, int]]:
    return [(rel, i) for rel, edits in apply_mod.EDITS.items() for i in range(len(edits))]


def _all_edit_ids() -> list[Any]:
    from oea_helpers import load_apply

    mod = load_apply()
    return [pytest.param(rel, i, id=f"{Path(rel).stem}-{i}") for rel, i in _edits(mod)]


@pytest.mark.parametrize("mode", ["removed", "doubled"])
@pytest.mark.parametrize(("rel", "index"), _all_edit_ids())
def test_missing_or_ambiguous_anchor_names_file_and_anchor(
    sglang_tree: Path, apply_mod: ModuleType, rel: str, index: int, mode: str
) -> None:
    anchor = apply_mod.EDITS[rel][index].anchor
    path = sglang_tree / rel
    text = path.read_text(encoding="utf-8")
    assert text.count(anchor) == 1
    path.write_text(text.replace(anchor, "" if mode == "removed" else anchor + anchor), encoding="utf-8")
    before = snapshot(sglang_tree)
    proc = run_apply("--root", sglang_tree, "--marker", sglang_tree / "PATCHED")
    assert proc.returncode == 1
    assert f"{rel}: anchor {anchor!r}" in proc.stderr
    assert ("not found" if mode == "removed" else "found 2 times") in proc.stderr
    assert_untouched(sglang_tree, before)


def test_patching_twice_is_refused(sglang_tree: Path) -> None:
    patch(sglang_tree)
    proc = run_apply("--root", sglang_tree, "--marker", sglang_tree / "PATCHED2")
    assert proc.returncode == 1 and "already contains 'kit OEA patch'" in proc.stderr


def test_syntax_error_fails_the_build(sglang_tree: Path, apply_mod: ModuleType, tmp_path: Path) -> None:
    broken = apply_mod.insert_before("    if routing_overridden:\n        apply_routing_simulation(\n", "    if (:\n")
    edits = dict(apply_mod.EDITS)
    edits[TOPK] = (*edits[TOPK][:-1], broken)
    apply_mod.EDITS = edits
    with pytest.raises(apply_mod.PatchError, match=r"topk\.py: does not compile after patching"):
        apply_mod.run(sglang_tree, None, tmp_path / "PATCHED")
    assert not (tmp_path / "PATCHED").exists()


# ---------------------------------------------------------------- image mode and the Dockerfile


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_image_mode_patches_the_installed_sglang(sglang_wheel: Path, tmp_path: Path) -> None:
    """No --root: apply.py finds sglang through the interpreter, writes kit_oea.pth and imports kit_oea."""
    torch = pytest.importorskip("torch", reason="the import check imports kit_oea, which needs torch")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = Path(
        subprocess.check_output([python, "-c", "import site; print(site.getsitepackages()[0])"], text=True).strip()
    )
    extract_tree(sglang_wheel, site)
    (site / "kit_test_torch.pth").write_text(f"{Path(torch.__file__).parent.parent}\n", encoding="utf-8")
    proc = run_apply("--marker", tmp_path / "PATCHED", python=python)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "PATCHED").read_text(encoding="utf-8"))
    assert record["sglang_root"] == str(site.resolve()) and record["pth"] == str(site.resolve() / "kit_oea.pth")
    check = record["import_check"]
    assert check["module"] == str(IMAGE_DIR.resolve() / "kit_oea" / "oea.py")
    assert isinstance(check["triton_kernels"], bool)
    assert check["triton_kernels"] or check["triton_error"], "a missing Triton is explained"
    probe = [python, "-c", "import kit_oea.oea as m; print(m.__file__)"]
    assert subprocess.check_output(probe, text=True, cwd="/").strip() == str(IMAGE_DIR.resolve() / "kit_oea" / "oea.py")


def test_dockerfile_is_classic_builder_legal() -> None:
    text = (IMAGE_DIR / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[:2] == ["ARG BASE_IMAGE", "FROM ${BASE_IMAGE}"]
    assert not text.lstrip().lower().startswith("# syntax"), "a BuildKit frontend directive"
    instructions = "\n".join(lines)
    assert "--mount" not in instructions and "<<" not in instructions and not instructions.endswith("\\")
    copies = {ln.split()[1]: ln.split()[2] for ln in lines if ln.startswith("COPY ")}
    assert copies == {"kit_oea": "/opt/kit_oea/kit_oea", "apply.py": "/opt/kit_oea/apply.py"}
    assert all((IMAGE_DIR / src).exists() for src in copies)
    assert lines[-1] == "RUN python3 /opt/kit_oea/apply.py"
    assert APPLY.parent == IMAGE_DIR
    assert "PATCHED" in (IMAGE_DIR / ".dockerignore").read_text(encoding="utf-8").split()
