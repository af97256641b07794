"""The split path's kernels compiled for an H200 (sm_90) on the CPU, no GPU needed: Triton's front end down to
PTX (and ptxas to a cubin), in a subprocess (this session's triton may be set up for the interpreter). What
the interpreter cannot show: with PDL, kernel B runs while kernel A still runs until its
``griddepcontrol.wait``, so before that instruction B may read only what predates kernel A (the router
logits and the correction bias), never A's bit sets nor the routed ids; and kernel A waits before any global
access and releases B only after its wait. Checked on the PTX: every global load before the wait, traced
back through the address arithmetic to the kernel parameter it is based on. (Timing and results on a GPU:
benchmarks/h200_hook.sh.)
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from oea_helpers import IMAGE_DIR

pytestmark = pytest.mark.slow  # ~15 s: eight kernels compiled

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

SCRIPT = textwrap.dedent(
    r'''
    import importlib.util, json, os, re, sys
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location("kit_oea_triton_ptx", sys.argv[1])
    tk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tk)
    TYPES = {"logits_ptr": "*bf16", "bias_ptr": "*fp32", "ids_ptr": "*i32", "w_ptr": "*fp32", "ntnp_ptr": "*i32",
             "part_ptr": "*i32", "union_ptr": "*i32", "scale": "fp32"}
    CONSTS = {"K": 8, "K0": 4, "BLOCK_M": 8, "BLOCK_N": 256, "BLOCK_K": 8, "WORDS": 8, "BLOCK_P": 256,
              "HAS_BIAS": True, "HAS_NTNP": True, "SOFTMAX": False, "USE_PDL": True, "RENORMALIZE": True,
              "USE_IDS": True, "CHECK_ROWS": False, "BLOCK_R": 1024, "BLOCK_U": 1, "ONE_PASS": False,
              "ATOMIC": False, "TOPK": False}
    # (label, kernel, constexprs over CONSTS): the split path's four kernels, and the prelaunched kernel B
    # (checking the ids; one-pass and looped, with either union) as KIT_OEA_B_PDL=1 launches it
    JOBS = [(n, n, {}) for n in ("_part_kernel", "_light_part_kernel", "_split_select_kernel",
                                 "_repair_select_kernel")]
    for one in (True, False):
        for atomic in (False, True):
            JOBS.append((f"prelaunched_b{'' if one else '_looped'}{'_atomic' if atomic else ''}",
                         "_split_select_kernel", {"CHECK_ROWS": True, "ONE_PASS": one, "ATOMIC": atomic}))
    JOBS.append(("prelaunched_b_topk", "_split_select_kernel", {"CHECK_ROWS": True, "ONE_PASS": True, "TOPK": True}))
    DEF = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.]*)\s+(%rd\d+),(.*);")

    def bases(reg, lines, end, seen):
        """The kernel parameters a 64-bit register's value is computed from (through %rd operands only)."""
        if reg in seen:
            return set()
        seen.add(reg)
        for i in range(end - 1, -1, -1):
            m = DEF.match(lines[i])
            if m and m.group(2) == reg:
                if m.group(1).startswith("ld.param"):
                    return {int(re.search(r"_param_(\d+)", lines[i]).group(1))}
                out = set()
                for src in re.findall(r"%rd\d+", m.group(3)):
                    out |= bases(src, lines, i, seen)
                return out
        return set()

    report = {}
    for label, name, extra in JOBS:
        fn = getattr(tk, name)
        table = {**CONSTS, **extra}
        args = [a for a in fn.arg_names if a not in table]
        sig = {a: TYPES.get(a, "i32") for a in args}
        consts = {a: table[a] for a in fn.arg_names if a in table}
        sig.update({a: "constexpr" for a in consts})
        src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(a),): v for a, v in consts.items()})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
        lines = kernel.asm["ptx"].splitlines()
        wait = [i for i, line in enumerate(lines) if "griddepcontrol.wait" in line]
        release = [i for i, line in enumerate(lines) if "griddepcontrol.launch_dependents" in line]
        glob = [i for i, line in enumerate(lines) if re.search(r"\b(ld|st|atom|red)\.global", line)]
        before = []
        for i in glob:
            if wait and i < wait[0]:
                regs = re.findall(r"\[\s*(%rd\d+)", lines[i])
                params = set().union(*(bases(r, lines, i, set()) for r in regs)) if regs else set()
                before.append([lines[i].split()[1] if lines[i].lstrip().startswith("@") else lines[i].split()[0],
                               sorted(args[p] for p in params if p < len(args))])
        report[label] = {"wait": wait, "release": release, "first_global": glob[0] if glob else None,
                        "before_wait": before, "cubin_bytes": len(kernel.asm["cubin"])}
    print(json.dumps(report))
    '''
)


@pytest.fixture(scope="module")
def ptx_report() -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(IMAGE_DIR / "kit_oea" / "triton_oea.py")],
                          capture_output=True, text=True, check=False, timeout=600)  # fmt: skip
    if proc.returncode != 0 and ("ptxas" in proc.stderr and "not found" in proc.stderr):
        pytest.skip(f"no ptxas for sm_90 in this triton: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize(
    "name", ["_split_select_kernel", "_repair_select_kernel", "prelaunched_b", "prelaunched_b_atomic",
             "prelaunched_b_looped", "prelaunched_b_looped_atomic", "prelaunched_b_topk"]
)  # fmt: skip
def test_kernel_b_reads_only_the_router_inputs_before_its_wait(name: str, ptx_report: dict[str, Any]) -> None:
    """(The prelaunched kernel B with PDL, ``KIT_OEA_B_PDL=1``: it may start while the router's last kernel runs,
    so before its wait it may not read the routed ids, nor kernel A's sets or union.)"""
    b = ptx_report[name]
    assert len(b["wait"]) == 1 and b["cubin_bytes"] > 0
    loads = b["before_wait"]
    assert loads, "no global load before the wait: the PDL overlap (ranking the logits while A runs) is gone"
    assert all(op.startswith("ld.global") for op, _ in loads), loads
    assert {p for _, params in loads for p in params} == {"logits_ptr", "bias_ptr"}, loads
    assert all(params for _, params in loads), f"a load before the wait whose base was not traced: {loads}"


@pytest.mark.parametrize("name", ["_part_kernel", "_light_part_kernel"])
def test_kernel_a_waits_before_any_global_access_and_releases_b_after(name: str, ptx_report: dict[str, Any]) -> None:
    a = ptx_report[name]
    assert len(a["wait"]) == 1 and len(a["release"]) == 1
    assert a["wait"][0] < a["release"][0] < a["first_global"], a
