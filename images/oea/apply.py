#!/usr/bin/env python3
"""Patch an installed sglang 0.5.23 with kit's Opportunistic Expert Activation (OEA) hook.

Run by the OEA image's Dockerfile (``RUN python3 /opt/kit_oea/apply.py``) and by kit's tests against
the real sglang 0.5.23 wheel (``--root DIR --marker FILE``). Steps, each failing the build with a
message that says what to do:

1. the installed sglang must be exactly 0.5.23;
2. anchored text edits to four files (see ``EDITS``; the fourth adds the marker to ``/server_info``).
   Every anchor must occur exactly once in its file or nothing is written; the error names the file and the
   anchor. Anchored edits are used instead of a unified diff because each one states exactly which upstream
   text it relies on, an unrelated change a few lines away does not break it, and the failure message can
   name the anchor;
3. the patched files and the ``kit_oea`` package are byte-compiled, so a syntax error fails the build;
4. a ``kit_oea.pth`` in sglang's site directory makes ``kit_oea`` importable (image mode also imports
   it in a fresh interpreter to prove that, and records whether its fused Triton kernels import);
5. ``PATCHED`` (JSON) records the sglang version and the sha256 of every patched file, before and after.

With ``SGLANG_OEA_K0`` unset or 0 the patched sglang routes exactly as upstream: every layer's
``oea_k0`` is 0, the TopK output format is upstream's, the decode flag is never set and the hook is
skipped by a Python-level check (``kit_oea`` is imported only to validate a knob that is set).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import py_compile
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TARGET_VERSION = "0.5.23"
PATCH_NAME = "kit-oea"
PATCH_FORMAT = 1
MARKER = "kit OEA patch"
HERE = Path(__file__).resolve().parent
PACKAGE_DIR = HERE / "kit_oea"

# sha256 of the target files in the PyPI wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl.
# A mismatch is not an error (the anchors decide); PATCHED records whether the sources were the wheel's.
WHEEL_SHA256 = {
    "sglang/srt/environ.py": "967ede87488967cf87a95f8c38ccd72a3a0055a03cbdac303b38c2322b987c55",
    "sglang/srt/model_executor/forward_context.py": "e612cb6399e58a1c01d7ce72e5309148edbb4b0d28eccc053489c6cc5c6b3852",
    "sglang/srt/layers/moe/topk.py": "6fe2628a407300021bad7afde5fd21d257eb480e730bcafff5ca9dcac386fb3b",
    "sglang/srt/entrypoints/http_server.py": "d5d7ae6c5e8f403f9a46617377ab96977d9d4f1f263c0b90fc9fd2769eef061e",
}


class PatchError(Exception):
    """A precondition of the patch does not hold; the message says which and what to do."""


@dataclass(frozen=True)
class Edit:
    """Replace ``anchor``, which must occur exactly once in its file, by ``replacement``."""

    anchor: str
    replacement: str


def insert_after(anchor: str, text: str) -> Edit:
    return Edit(anchor, anchor + text)


def insert_before(anchor: str, text: str) -> Edit:
    return Edit(anchor, text + anchor)


ENVIRON_KNOB = insert_after(
    "    SGLANG_SIMULATE_ROUND_ROBIN_EXPERTS = EnvBool(False)\n",
    (
        "    # kit OEA patch: Opportunistic Expert Activation k0 for decode batches (0 = off, upstream routing).\n"
        "    SGLANG_OEA_K0 = EnvInt(0)\n"
    ),
)

CONTEXT_IMPORT = insert_after(
    "from typing import TYPE_CHECKING, Callable, Optional\n",
    (
        "\n"
        "from sglang.srt.environ import envs\n"
        "\n"
        "# kit OEA patch: read once at import; with 0 every forward context is exactly upstream's.\n"
        "_KIT_OEA_ENABLED = envs.SGLANG_OEA_K0.get() != 0\n"
    ),
)

CONTEXT_FIELD = insert_after(
    "    moe_num_token_non_padded: Optional[Callable[[], Optional[torch.Tensor]]] = None\n",
    (
        "    # kit OEA patch: True while the forward runs a plain decode batch (ForwardMode.DECODE).\n"
        "    oea_active: bool = False\n"
    ),
)

CONTEXT_FLAG = insert_before(
    "    prev = set_forward_context(ctx)\n",
    (
        "    # kit OEA patch: set the decode flag from the batch; a nested scope without one inherits it.\n"
        "    if _KIT_OEA_ENABLED:\n"
        "        if forward_batch is not None:\n"
        "            ctx = replace(ctx, oea_active=forward_batch.forward_mode.is_decode())\n"
        "        elif _current is not None and not ctx.oea_active:\n"
        "            ctx = replace(ctx, oea_active=_current.oea_active)\n"
    ),
)

TOPK_CONFIG_FIELD = insert_after(
    (
        "    # Lazy materialization still needs the producer's solver and capture slot.\n"
        "    layer_id: Optional[int] = None\n"
    ),
    ("    # kit OEA patch: Opportunistic Expert Activation k0 of this layer (0 = off).\n    oea_k0: int = 0\n"),
)

_TOPK_INIT_END = (
    "            allow_routed_experts_capture=allow_routed_experts_capture\n"
    "            and not self.is_draft,\n"
    "        )\n"
)
_TOPK_NEXT_METHOD = "\n    def routing_inputs(self):\n"
# Between the end of the TopKConfig(...) call in TopK.__init__ and the next method.
TOPK_INIT = Edit(
    _TOPK_INIT_END + _TOPK_NEXT_METHOD,
    _TOPK_INIT_END
    + "        # kit OEA patch: non-draft layers only; kit_oea validates the knob strictly against this\n"
    "        # layer. OEA rewrites materialised top-k ids, so the output must be STANDARD (no in-kernel\n"
    "        # routing) and the router must not pre-pack ids.\n"
    "        if not self.is_draft and envs.SGLANG_OEA_K0.is_set():\n"
    "            from kit_oea.oea import layer_k0\n"
    "\n"
    "            self.topk_config.oea_k0 = layer_k0(self.topk_config)\n"
    # kit OEA patch (server set-up refusals): DP attention, A2A expert parallelism, speculative decoding and
    # padded decode graphs make OEA compute something else; kit_oea.guard names the flag and the fix.
    "            if self.topk_config.oea_k0:\n"
    "                from kit_oea.guard import refuse_unsupported_setup\n"
    "\n"
    "                refuse_unsupported_setup(self.topk_config.oea_k0)\n"
    "        if self.topk_config.oea_k0:\n"
    "            self.topk_config.output_format = TopKOutputFormat.STANDARD\n"
    "            self.topk_config.fused_gate_packed_ids = False\n" + _TOPK_NEXT_METHOD,
)

TOPK_PRELAUNCH = insert_before(
    "    # Only aiter_biased_grouped_topk wants the bias in the gating dtype. The JIT\n",
    (
        "    # kit OEA patch: the fused hook's first kernel (the union of every row's top-k0 needs only the\n"
        "    # router logits) starts here on a side stream, beside the router's top-k; the hook joins it.\n"
        "    _kit_oea_prelaunched = None\n"
        "    if (\n"
        "        topk_config.oea_k0\n"
        "        and not routing_overridden\n"
        "        and not _use_aiter\n"
        "        and has_forward_context()\n"
        "        and get_forward_context().oea_active\n"
        "    ):\n"
        "        from kit_oea.oea import oea_prelaunch_\n"
        "\n"
        "        _kit_oea_prelaunched = oea_prelaunch_(\n"
        "            router_logits,\n"
        "            k0=topk_config.oea_k0,\n"
        "            k=top_k - num_shared_topk_slots,\n"
        "            scoring_func=scoring_func,\n"
        "            correction_bias=correction_bias,\n"
        "            num_token_non_padded=num_token_non_padded,\n"
        "        )\n"
        "\n"
    ),
)

TOPK_HOOK = insert_before(
    "    if routing_overridden:\n        apply_routing_simulation(\n",
    (
        "    # kit OEA patch: Opportunistic Expert Activation on decode batches, after the router and the\n"
        "    # scale fold, before EPLB remap, padded-row masking, routed-expert capture and the recorder.\n"
        "    if (\n"
        "        topk_config.oea_k0\n"
        "        and not routing_overridden\n"
        "        and has_forward_context()\n"
        "        and get_forward_context().oea_active\n"
        "    ):\n"
        "        from kit_oea.oea import oea_reroute_\n"
        "\n"
        "        oea_reroute_(\n"
        "            topk_ids,\n"
        "            topk_weights,\n"
        "            router_logits,\n"
        "            k0=topk_config.oea_k0,\n"
        "            k=num_routed_topk,\n"
        "            scoring_func=scoring_func,\n"
        "            correction_bias=correction_bias,\n"
        "            renormalize=renormalize,\n"
        "            routed_scaling_factor=(\n"
        "                routed_scaling_factor\n"
        "                if is_routed_scaling_factor_fused_in_topk(topk_config)\n"
        "                else None\n"
        "            ),\n"
        "            num_token_non_padded=num_token_non_padded,\n"
        "            prelaunched=_kit_oea_prelaunched,\n"
        "        )\n"
        "        # Ids the router packed for FlashInfer predate the rewrite; consumers re-pack without them.\n"
        "        packed_topk = None\n"
        "\n"
    ),
)


SERVER_INFO_MARKER = insert_after(
    '                "frontend": "python",\n',
    (
        "                # kit OEA patch: the patch's marker (PATCHED), so that kit records it with every cell.\n"
        '                "kit_oea_patch": __import__("kit_oea.marker", fromlist=["read_marker"]).read_marker(),\n'
    ),
)


EDITS: dict[str, tuple[Edit, ...]] = {
    "sglang/srt/environ.py": (ENVIRON_KNOB,),
    "sglang/srt/model_executor/forward_context.py": (CONTEXT_IMPORT, CONTEXT_FIELD, CONTEXT_FLAG),
    "sglang/srt/layers/moe/topk.py": (TOPK_CONFIG_FIELD, TOPK_INIT, TOPK_PRELAUNCH, TOPK_HOOK),
    "sglang/srt/entrypoints/http_server.py": (SERVER_INFO_MARKER,),
}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply_edit(text: str, edit: Edit, rel: str) -> str:
    """``text`` with ``edit`` applied; PatchError naming ``rel`` and the anchor unless it occurs exactly once."""
    count = text.count(edit.anchor)
    if count != 1:
        found = "not found" if count == 0 else f"found {count} times"
        raise PatchError(
            f"{rel}: anchor {edit.anchor!r} {found} (expected exactly once). The sglang sources do not match"
            f" what the kit OEA patch for sglang {TARGET_VERSION} was written against; update images/oea/apply.py."
        )
    return text.replace(edit.anchor, edit.replacement, 1)


def patch_text(text: str, rel: str, edits: tuple[Edit, ...]) -> str:
    """All of ``edits`` applied to one file's text, refusing a file that already carries the patch."""
    if MARKER in text:
        raise PatchError(
            f"{rel}: already contains {MARKER!r}; build the OEA image from an unpatched sglang {TARGET_VERSION} base"
        )
    for edit in edits:
        text = apply_edit(text, edit, rel)
    return text


def check_version(version: str) -> None:
    if version != TARGET_VERSION:
        raise PatchError(
            f"kit OEA patch targets sglang {TARGET_VERSION}; this image has sglang {version}. "
            f"Rebuild the patch for that version or pin the baseline to {TARGET_VERSION}"
        )


def version_in_root(root: Path) -> str:
    """sglang's version in a site-packages-like ``root``: its dist-info, else ``sglang/_version.py``."""
    metas = sorted(root.glob("sglang-*.dist-info/METADATA"))
    if len(metas) > 1:
        raise PatchError(f"{root}: several sglang dist-info directories: {[m.parent.name for m in metas]}")
    if metas:
        for line in metas[0].read_text(encoding="utf-8").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    version_file = root / "sglang" / "_version.py"
    if version_file.is_file():
        match = re.search(r"^__version__ = version = '([^']+)'", version_file.read_text(encoding="utf-8"), re.M)
        if match:
            return match.group(1)
    raise PatchError(f"{root}: cannot tell the sglang version (no sglang-*.dist-info/METADATA, no sglang/_version.py)")


def locate_installed() -> tuple[Path, Path, str]:
    """(directory holding the ``sglang`` package, site directory holding its metadata, version) of this Python."""
    try:
        dist = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError as exc:
        raise PatchError(f"sglang is not installed for {sys.executable}; the OEA image needs an sglang base") from exc
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError(f"sglang's metadata is installed but the package cannot be found by {sys.executable}")
    package_root = Path(next(iter(spec.submodule_search_locations))).resolve().parent
    site_dir = Path(str(dist.locate_file(""))).resolve()
    return package_root, site_dir, dist.version


def plan(package_root: Path) -> dict[str, tuple[bytes, str]]:
    """Original bytes and patched text of every target file; nothing is written here."""
    out: dict[str, tuple[bytes, str]] = {}
    for rel, edits in EDITS.items():
        path = package_root / rel
        if not path.is_file():
            raise PatchError(f"{rel}: not found under {package_root}")
        original = path.read_bytes()
        out[rel] = (original, patch_text(original.decode("utf-8"), rel, edits))
    return out


def byte_compile(paths: list[Path]) -> None:
    for path in paths:
        try:
            py_compile.compile(str(path), doraise=True)
        except py_compile.PyCompileError as exc:
            raise PatchError(f"{path}: does not compile after patching: {exc.msg}") from exc


def write_pth(site_dir: Path) -> Path:
    pth = site_dir / "kit_oea.pth"
    pth.write_text(f"{HERE}\n", encoding="utf-8")
    return pth


IMPORT_PROBE = (
    "import json, sys, kit_oea.oea as m; m._load_triton(); "
    "sys.stdout.write(json.dumps({'module': m.__file__, 'triton_kernels': m._triton is not None, "
    "'triton_error': m._triton_error}))"
)


def import_check() -> dict[str, object]:
    """A fresh interpreter must import ``kit_oea.oea`` through the .pth (image mode only). Whether the
    fused Triton kernels import too is recorded, not required: without them the hook runs as torch ops."""
    proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, check=False, cwd="/")
    if proc.returncode != 0:
        raise PatchError(f"kit_oea is not importable after patching: {proc.stderr.strip()[-2000:]}")
    return dict(json.loads(proc.stdout))


def marker_record(version: str, planned: dict[str, tuple[bytes, str]], package_root: Path) -> dict[str, object]:
    files = {}
    for rel, (original, patched) in planned.items():
        before = sha256_bytes(original)
        files[rel] = {
            "sha256": sha256_bytes(patched.encode("utf-8")),
            "sha256_before": before,
            "before_matches_wheel": before == WHEEL_SHA256.get(rel),
        }
    package = {p.name: sha256_bytes(p.read_bytes()) for p in sorted(PACKAGE_DIR.glob("*.py"))}
    return {
        "patch": PATCH_NAME,
        "format": PATCH_FORMAT,
        "sglang_version": version,
        "sglang_root": str(package_root),
        "env_knob": "SGLANG_OEA_K0",
        "files": files,
        "kit_oea_sha256": package,
    }


def run(root: Path | None, version_override: str | None, marker: Path) -> dict[str, object]:
    if root is None:
        package_root, site_dir, version = locate_installed()
    else:
        package_root = site_dir = root.resolve()
        version = version_in_root(package_root)
    version = version_override or version
    check_version(version)
    planned = plan(package_root)
    for rel, (_, patched) in planned.items():
        (package_root / rel).write_text(patched, encoding="utf-8")
    byte_compile([package_root / rel for rel in planned] + sorted(PACKAGE_DIR.glob("*.py")))
    pth = write_pth(site_dir)
    imported = import_check() if root is None else None
    record = marker_record(version, planned, package_root)
    record["pth"] = str(pth)
    record["import_check"] = imported
    marker.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return record


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="site-packages-like dir holding sglang/ (default: the installed one)")
    parser.add_argument("--version", help="treat the sglang found as this version (tests)")
    parser.add_argument("--marker", type=Path, default=HERE / "PATCHED", help="where to write the record")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        record = run(args.root, args.version, args.marker)
    except PatchError as exc:
        print(f"kit OEA patch: error: {exc}", file=sys.stderr)
        return 1
    files = record["files"]
    assert isinstance(files, dict)
    for rel, info in files.items():
        print(f"kit OEA patch: patched {rel} sha256 {info['sha256']}")
    print(f"kit OEA patch: sglang {record['sglang_version']} patched; record in {args.marker}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
