"""The patch's marker per cell: the patched sglang 0.5.23 ``/server_info`` (the wheel's http_server.py, patched by
apply.py) adds ``kit_oea_patch`` from kit_oea.marker, which reads the PATCHED apply.py wrote; kit's reader
(kit.runtime.server_info) keeps it, against a real HTTP server answering with that document."""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kit_oea.marker import read_marker
from oea_helpers import HTTP_SERVER, run_apply

from kit.runtime import ServerSpec
from kit.runtime.server_info import read_server_info


def server_info_dict(tree: Path) -> ast.Dict:
    module = ast.parse((tree / HTTP_SERVER).read_text(encoding="utf-8"))
    fn = next(n for n in ast.walk(module) if isinstance(n, ast.AsyncFunctionDef) and n.name == "server_info")
    return next(n for n in ast.walk(fn) if isinstance(n, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "frontend" for k in n.keys))


def test_the_patched_server_info_adds_the_marker_last(sglang_tree: Path) -> None:
    original = server_info_dict(sglang_tree)
    assert "kit_oea_patch" not in [k.value for k in original.keys if isinstance(k, ast.Constant)]
    proc = run_apply("--root", sglang_tree, "--marker", sglang_tree / "PATCHED")
    assert proc.returncode == 0, proc.stderr
    patched = server_info_dict(sglang_tree)
    keys = [k.value if isinstance(k, ast.Constant) else None for k in patched.keys]
    assert keys[-2:] == ["frontend", "kit_oea_patch"] and keys[:-1] == [
        k.value if isinstance(k, ast.Constant) else None for k in original.keys]
    assert ast.unparse(patched.values[-1]) == \
        "__import__('kit_oea.marker', fromlist=['read_marker']).read_marker()"


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    doc: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield int(httpd.server_address[1]), doc
    httpd.shutdown()
    httpd.server_close()


def test_the_marker_apply_wrote_reaches_the_cell_file(sglang_tree: Path, serving: tuple[int, dict[str, Any]],
                                                      tmp_path: Path) -> None:
    proc = run_apply("--root", sglang_tree, "--marker", sglang_tree / "PATCHED")
    assert proc.returncode == 0, proc.stderr
    marker = read_marker(sglang_tree / "PATCHED")
    assert marker["sglang_version"] == "0.5.23" and marker["patch"] == "kit-oea"
    assert "guard.py" in marker["kit_oea_sha256"] and "marker.py" in marker["kit_oea_sha256"]
    port, doc = serving
    doc.update({"version": "0.5.23", "max_total_num_tokens": 300000, "frontend": "python", "kit_oea_patch": marker})
    spec = ServerSpec(name="t", arm="oea", command=["x"], env={}, secret_env={}, host="127.0.0.1", port=port,
                      readiness_path="/health", ready_timeout_s=1, stop_grace_s=1, log_path=tmp_path / "log",
                      labels={})
    got = read_server_info(spec, "/server_info")
    assert got.patch == marker and got.version == "0.5.23"


def test_a_missing_or_broken_marker_says_why(tmp_path: Path) -> None:
    assert read_marker(tmp_path / "none")["error"].endswith("No such file or directory")
    (tmp_path / "bad").write_text("{")
    assert read_marker(tmp_path / "bad")["error"].startswith(f"{tmp_path / 'bad'}: not JSON")
    (tmp_path / "big").write_bytes(b" " * (64 * 1024 + 1))
    assert read_marker(tmp_path / "big")["error"].endswith("larger than 65536 bytes")
