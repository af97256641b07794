"""A whole `kit run` over https (server.scheme: https): kit's engine serves TLS (--tls-cert/--tls-key) with a
certificate of a CA made here, and every path of kit's reaches it verified against the pinned load.request.ca_bundle:
readiness, server_info, the quality check, the metrics scrapes and telemetry, the load. Then the same run with
another CA's file pinned: refused at readiness with exit 7, naming the certificate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import ROOT, bundle_of, kit, read_json
from support.manifests import ab_arms, engine_command, manifest_data, write_manifest
from support.scrapes import assert_scrapes_answered
from support.tls import make_pki

pytestmark = pytest.mark.slow


def _manifest(tmp_path: Path, port: int, pin: dict[str, str], cert: Path, key: Path) -> Path:
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} plus 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(4)))
    return write_manifest(tmp_path / "https.yaml", manifest_data(
        "https", port=port, arms=ab_arms(),
        command=[*engine_command(), "--tls-cert", str(cert), "--tls-key", str(key)],
        # this checkout's engine (kit's Python may import another's: the server gets no PYTHONPATH of kit's own)
        server={"scheme": "https", "env": {"PYTHONPATH": str(ROOT)}, "ready_timeout_s": 60, "stop_grace_s": 5, "info_path": "/v1/models"},
        load={"levels": [1], "warmup_requests": 1, "prompt_tokens": 8, "output_tokens": 4,
              "arrival": {"duration_s": 2.5},  # long enough for the telemetry sampler's ticks (1 s)
              "seed": 3, "request_timeout_s": 60, "request": {"ca_bundle": pin}},
        design={"repeats": 1}, gates={"port_deadline_s": 5},
        quality={"dataset": str(data), "shots": 1, "questions": 2, "concurrency": 1, "max_tokens": 16}))


def test_a_run_over_https(tmp_path: Path, port: int, isolated: dict[str, str]) -> None:
    pki = make_pki(tmp_path / "pki")
    m = _manifest(tmp_path, port, pki.pin(), pki.cert, pki.key)
    out = tmp_path / "results"
    r = kit("run", str(m), "--out", str(out), "--allow-unsigned", env=isolated)
    assert r.returncode == 0, r.stdout + r.stderr
    b = bundle_of(out)
    for cell in read_json(b / "plan.json")["cells"]:
        c = b / "cells" / cell["id"]
        assert read_json(c / "server_info.json")["status"] == 200
        assert read_json(c / "quality.json")["errors"] == 0
        metrics = read_json(c / "level-1" / "server_metrics.json")
        assert metrics["before"] and metrics["after"]  # the engine's /metrics, scraped over https
        tele = read_json(c / "level-1" / "telemetry.json")
        samples = [json.loads(x) for x in (c / "level-1" / "telemetry.jsonl").read_text().splitlines()]
        assert tele["metrics_url"].startswith("https://"), tele
        assert_scrapes_answered(tele, samples)  # scraped over https; a lost scrape only ever a timeout
        assert all(s.get("server") for s in samples if s.get("metrics_error") is None), samples
        client = read_json(c / "level-1" / "client.json")
        assert client["ok"] >= 4 and client["errors"] == 0 and client["spec"]["base_url"].startswith("https://")
    report = (b / "report.md").read_text()
    assert f"the certificate and name verified against `{pki.ca.resolve()}`" in report
    for f in b.rglob("*"):  # the server's private key never reaches the bundle
        if f.is_file():
            assert b"PRIVATE KEY" not in f.read_bytes(), f


def test_another_ca_is_refused_with_exit_7(tmp_path: Path, port: int, isolated: dict[str, str]) -> None:
    pki, other = make_pki(tmp_path / "pki"), make_pki(tmp_path / "other", tag="-other")
    m = _manifest(tmp_path, port, other.pin(), pki.cert, pki.key)
    out = tmp_path / "results"
    r = kit("run", str(m), "--out", str(out), "--allow-unsigned", env=isolated)
    assert r.returncode == 7, r.stdout + r.stderr
    cells = [read_json(f) for f in sorted(bundle_of(out).glob("cells/*/cell.json"))]
    assert cells and all(c["status"] == "failed" and "certificate is refused" in c["reason"]
                         and "unable to get local issuer certificate" in c["reason"] for c in cells), cells
