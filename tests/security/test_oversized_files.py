"""A received bundle directory with a huge file costs what it signs, not what it holds (a review's attack: an 8 GiB
sparse file made `kit reproduce --dry-run` write 8 GiB to TMPDIR before refusing it, and `kit verify` hash it
in full). Sparse files: the attack costs the attacker nothing, so nothing here may read or copy one whole.

The reproduction's copy runs in a child process whose file-size limit (RLIMIT_FSIZE, enforced by the kernel) is
64 MiB: a copy of the huge file would fail there with EFBIG (Python ignores SIGXFSZ), not be refused by kit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.bundles import build_bundle

from kit.cli import main
from kit.errors import ExitCode
from kit.signing import generate_key

HUGE = 8 << 30
LIMIT = 64 << 20
VICTIM = "cells/oea-r1/level-4/records.jsonl"


@pytest.fixture
def signed(tmp_path: Path, kit_home: Path) -> tuple[Path, Path]:
    key = generate_key(tmp_path / "keys" / "runner", "kit-runner@test")
    trust = tmp_path / "trust"
    trust.write_text(f'runner namespaces="kit-bundle" {key.public_line()}\n')
    return build_bundle(tmp_path / "results", key).root, trust


def _sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(HUGE)


def _open_in_child(root: Path, trust: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    code = ("import sys\nfrom pathlib import Path\nfrom kit.errors import KitError\n"
            "from kit.reproduce.source import opened\n"
            "try:\n    with opened(Path(sys.argv[1]), [Path(sys.argv[2])], allow_untrusted=False):\n        pass\n"
            "except KitError as e:\n    print(e.exit_code, e.message)\n    sys.exit(0)\nsys.exit(5)\n")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    return subprocess.run([sys.executable, "-c", code, str(root), str(trust)], capture_output=True, text=True, check=False,
                          timeout=120, preexec_fn=limit, env={**os.environ, "TMPDIR": str(tmp)})


@pytest.mark.parametrize("where", ["extra", "replaced"])
def test_reproduce_copies_a_directory_no_further_than_it_signs(signed: tuple[Path, Path], tmp_path: Path,
                                                               where: str) -> None:
    root, trust = signed
    _sparse(root / "cells" / "zz-sparse" if where == "extra" else root / VICTIM)
    (tmp_path / "t").mkdir()
    r = _open_in_child(root, trust, tmp_path / "t")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])  # 1: EFBIG, copying past the limit
    code, _, message = r.stdout.strip().partition(" ")
    assert int(code) == ExitCode.BUNDLE_INVALID
    want = "extra file not in provenance: cells/zz-sparse" if where == "extra" else \
        f"{VICTIM}: larger than its signed size"
    assert want in message, message
    assert not any((tmp_path / "t").iterdir())  # the private copy is gone


def test_verify_refuses_a_file_by_its_signed_size_before_hashing_it(signed: tuple[Path, Path]) -> None:
    root, trust = signed
    signed_size = (root / VICTIM).stat().st_size
    _sparse(root / VICTIM)
    for args in (["verify", "--trust", str(trust), str(root)], ["verify", "--integrity-only", str(root)],
                 ["report", "--trust", str(trust), str(root)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == ExitCode.BUNDLE_INVALID, r.output
        assert f"{VICTIM}: sha256 differs from the signed provenance ({HUGE} bytes, not the {signed_size} signed: " \
               "refused by its size, not hashed)" in r.output, r.output
