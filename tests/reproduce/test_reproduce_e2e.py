"""`kit reproduce` end to end with the real engine and load generator: a signed tiny manifest is run, archived and
reproduced from the archive and from the directory; the new bundles verify and name their source; an untrusted, a
tampered and an unapproved source are refused before anything runs; --dry-run touches nothing."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from reproduce_helpers import rewrite_member
from support.manifests import ab_arms, engine_command, manifest_data, write_manifest
from support.ports import free_port

from kit.files.schema import validate_bundle_files
from kit.signing import generate_key

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_KEY = ROOT / "keys" / "example_ed25519"
EXIT = {"reproduced": 0, "inconsistent": 10, "imprecise": 11}

# four short `kit run`s of 4 cells each (5-10 s each on an idle 2-core machine): the original, run once for the
# module (both tests only read it), and three reproductions. One xdist group: both tests on the worker that made it.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("reproduce-e2e")]


def kit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=ROOT, check=False)


def only(d: Path) -> Path:
    found = [p for p in d.iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return found[0]


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny engine manifest signed with the repository's example key, a runner key, a policy trusting both,
    and the bundle of one run of it (the source both tests reproduce; neither changes it)."""
    tmp = tmp_path_factory.mktemp("original")
    m = write_manifest(tmp / "tiny.yaml", manifest_data(
        "tiny", port=free_port(), arms=ab_arms(), server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1, 4], "requests_per_level": 16, "warmup_requests": 2, "prompt_tokens": 8,
              "output_tokens": 8, "seed": 3, "request_timeout_s": 60},
        design={"repeats": 2, "order": "interleaved"}, gates={"port_deadline_s": 5}))
    runner = generate_key(tmp / "runner", "runner@test")
    example = (ROOT / "keys" / "example_ed25519.pub").read_text().split()
    policy = tmp / "policy"
    policy.write_text(f'kit-example namespaces="kit-manifest" {example[0]} {example[1]}\n'
                      f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    env = env_of(tmp)
    assert kit("sign", str(m), "--key", str(EXAMPLE_KEY), env=env).returncode == 0
    r = kit("run", str(m), "--out", str(tmp / "a"), "--trust", str(policy), "--key", str(runner.path), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return {"manifest": m, "key": runner.path, "policy": policy, "original": only(tmp / "a")}


@pytest.fixture
def setup(made: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """The module's manifest, keys, policy and original bundle; this test's own directory for what it makes."""
    return {**made, "tmp": tmp_path}


def env_of(tmp: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp / "config"), "XDG_STATE_HOME": str(tmp / "state"),
            "DOCKER_HOST": f"unix://{tmp}/no-docker.sock", "PYTHONPATH": str(ROOT)}


def test_run_archive_reproduce_verify(setup: dict[str, Path]) -> None:
    tmp, key, policy = setup["tmp"], setup["key"], setup["policy"]
    env = env_of(tmp)
    original = setup["original"]
    tar = tmp / "shared.tar.gz"
    assert kit("archive", str(original), "-o", str(tar), env=env).returncode == 0

    # --dry-run: says what would run; builds, starts and writes nothing
    d = kit("reproduce", str(tar), "--out", str(tmp / "dry"), "--trust", str(policy), "--dry-run", env=env)
    assert d.returncode == 0, d.stderr
    assert "would re-run: tiny, runtime process, the source's plan: 4 cells (interleaved)" in d.stdout
    assert "the original run took" in d.stdout and not (tmp / "dry").exists()
    assert "(4 cells at the original's" in d.stdout  # the estimate from what its cells took (was 5x too long)

    # --resume with the source itself: refused, exit 2, the source untouched (it exited 0 with "verdict: REPRODUCED"
    # and sealed the original as a reproduction of itself, re-signed)
    prov = sha(original / "provenance.dsse.json")
    own = kit("reproduce", str(tar), "--resume", str(original), "--trust", str(policy), "--key", str(key), env=env)
    assert own.returncode == 2, own.stdout + own.stderr
    assert f"--resume {original}: this is the source bundle itself" in own.stderr, own.stderr
    assert sha(original / "provenance.dsse.json") == prov and not (original / "reproduce.json").exists()

    # from the archive
    r = kit("reproduce", str(tar), "--out", str(tmp / "b"), "--trust", str(policy), "--key", str(key), env=env)
    new = only(tmp / "b")
    report = json.loads((new / "reproduce.json").read_text())
    assert r.returncode == EXIT[report["verdict"]], r.stdout + r.stderr
    out = r.stdout
    assert out.index("setup (original → new):") < out.index("reproduction of tpot_mean_ms") < out.index("verdict:")
    assert f"bundle: {new}" in out and "  same:    manifest.yaml sha256, manifest.yaml.sig sha256" in out
    assert report["source"]["kind"] == "archive" and report["source"]["archive_sha256"] == sha(tar)
    prov = sha(original / "provenance.dsse.json")
    assert report["source"]["provenance_sha256"] == prov and report["source"]["trusted"] is True
    assert len(report["comparisons"]) == 6 and {i["status"] for i in report["images"]} == {"identical"}
    assert (new / "source" / "provenance.dsse.json").read_bytes() == (original / "provenance.dsse.json").read_bytes()
    assert (new / "manifest.yaml").read_bytes() == (original / "manifest.yaml").read_bytes()
    assert (new / "manifest.yaml.sig").read_bytes() == (original / "manifest.yaml.sig").read_bytes()
    assert json.loads((new / "plan.json").read_text()) == json.loads((original / "plan.json").read_text())
    run = json.loads((new / "run.json").read_text())
    assert run["reproduces"]["source"]["provenance_sha256"] == prov and run["argv"][1] == "reproduce"

    v = kit("verify", str(new), "--trust", str(policy), env=env)
    assert v.returncode == 0, v.stdout + v.stderr
    assert f"reproduces {original.name} (run {original.name.rsplit('-', 1)[1]}, provenance sha256 {prov})" in v.stdout
    schema = json.loads((ROOT / "bundle.schema.json").read_text())
    checked = set(validate_bundle_files(new, schema))
    every_json = {p.relative_to(new).as_posix() for p in new.rglob("*") if p.suffix in (".json", ".jsonl", ".sig")}
    assert every_json - checked == set() and "reproduce.json" in checked

    # from the directory, then judged again with --resume (nothing left to run)
    r2 = kit("reproduce", str(original), "--out", str(tmp / "c"), "--trust", str(policy), "--key", str(key),
             env=env)
    new2 = only(tmp / "c")
    report2 = json.loads((new2 / "reproduce.json").read_text())
    assert r2.returncode == EXIT[report2["verdict"]], r2.stdout + r2.stderr
    assert report2["source"]["kind"] == "directory" and report2["source"]["provenance_sha256"] == prov
    again = kit("reproduce", str(tar), "--resume", str(new2), "--trust", str(policy), "--key", str(key), env=env)
    assert again.returncode == EXIT[report2["verdict"]], again.stdout + again.stderr
    report3 = json.loads((new2 / "reproduce.json").read_text())
    assert report3["comparisons"] == report2["comparisons"] and report3["source"]["kind"] == "archive"
    assert kit("verify", str(new2), "--trust", str(policy), env=env).returncode == 0
    assert len(list((tmp / "c").iterdir())) == 1  # resumed in place


def test_untrusted_tampered_and_unapproved_sources_are_refused_before_anything_runs(setup: dict[str, Path]) -> None:
    tmp, key, policy = setup["tmp"], setup["key"], setup["policy"]
    env = env_of(tmp)
    original = setup["original"]
    manifest_only = tmp / "manifest-only"
    manifest_only.write_text(policy.read_text().splitlines()[0] + "\n")  # approves the manifest, trusts no runner

    u = kit("reproduce", str(original), "--out", str(tmp / "u"), "--trust", str(manifest_only), env=env)
    assert u.returncode == 9 and "UNTRUSTED" in u.stderr and "--allow-untrusted-source" in u.stderr
    assert not (tmp / "u").exists()

    tampered = tmp / "t" / original.name
    shutil.copytree(original, tampered)
    rec = tampered / "cells" / "oea-r1" / "level-4" / "records.jsonl"
    rec.write_bytes(rec.read_bytes().replace(b'"status":200', b'"status":201', 1))
    tar = tmp / "tampered.tar.gz"
    a = kit("archive", str(tampered), "-o", str(tar), env=env)  # kit archive writes only what was sealed
    assert a.returncode == 9 and "cells/oea-r1/level-4/records.jsonl" in a.stderr and not tar.exists(), a.stderr
    assert kit("archive", str(original), "-o", str(tar), env=env).returncode == 0  # altered after, as others could
    rewrite_member(tar, f"{original.name}/cells/oea-r1/level-4/records.jsonl",
                   lambda d: d.replace(b'"status":200', b'"status":201', 1))
    t = kit("reproduce", str(tar), "--out", str(tmp / "tt"), "--trust", str(policy), env=env)
    assert t.returncode == 9 and "cells/oea-r1/level-4/records.jsonl" in t.stderr and not (tmp / "tt").exists()

    runner_only = tmp / "runner-only"
    runner_only.write_text(policy.read_text().splitlines()[1] + "\n")  # trusts the runner, approves no manifest
    s = kit("reproduce", str(original), "--out", str(tmp / "s"), "--trust", str(runner_only), env=env)
    assert s.returncode == 4 and "--allow-unsigned" in s.stderr and not (tmp / "s").exists()

    # accepted when told so; the choice is recorded in the new bundle and shown by kit verify
    ok = kit("reproduce", str(original), "--out", str(tmp / "ok"), "--trust", str(manifest_only),
             "--allow-untrusted-source", "--key", str(key), env=env)
    new = only(tmp / "ok")
    report = json.loads((new / "reproduce.json").read_text())
    assert ok.returncode == EXIT[report["verdict"]], ok.stdout + ok.stderr
    assert report["source"]["trusted"] is False and report["source"]["allow_untrusted_source"] is True
    assert any("not trusted by your policy" in n for n in report["notes"])
    v = kit("verify", str(new), "--trust", str(policy), env=env)
    assert v.returncode == 0 and "allow_untrusted_source=true" in v.stdout, v.stdout + v.stderr


DEMO_ENGINE = ["--seed", "0", "--experts", "64", "--top-k", "8", "--layers", "4"]  # experiments/demo.yaml's engine


def _variant(setup: dict[str, Path], name: str, k0: str) -> Path:
    """The tiny manifest with oea at ``k0``, signed with the example key, run into tmp/<name>: its bundle."""
    tmp, port = setup["tmp"], int(setup["manifest"].read_text().split("port: ")[1].split()[0])
    m = write_manifest(tmp / f"{name}.yaml", manifest_data(
        "tiny", port=port, arms=[{"name": "baseline"}, {"name": "oea", "args": ["--oea-k0", k0]}],
        command=engine_command(engine_args=DEMO_ENGINE), server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": 16, "warmup_requests": 2, "prompt_tokens": 8,
              "output_tokens": 32, "seed": 3, "request_timeout_s": 60},
        design={"repeats": 3, "order": "interleaved"}, gates={"port_deadline_s": 5}))
    env = env_of(tmp)
    assert kit("sign", str(m), "--key", str(EXAMPLE_KEY), env=env).returncode == 0
    r = kit("run", str(m), "--out", str(tmp / name), "--trust", str(setup["policy"]), "--key", str(setup["key"]),
            env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return only(tmp / name)


def test_a_rerun_whose_variant_changed_is_inconsistent(setup: dict[str, Path]) -> None:
    """The real engine as experiments/demo.yaml runs it (64 experts, top-8), oea at --oea-k0 4 originally and at 1
    in the re-run (at concurrency 1 OEA is plain top-k0: a quarter of the expert reads): judged by `kit compare --strict`, the rule `kit reproduce` applies (kit reproduce itself
    re-runs the source's signed manifest bytes, so it cannot change the variant), the effect is inconsistent, exit
    10; the server commands name the changed argument."""
    original, changed = _variant(setup, "k4", "4"), _variant(setup, "k1", "1")
    r = kit("compare", str(original), str(changed), "--strict", "--json", env=env_of(setup["tmp"]))
    doc = json.loads(r.stdout)
    effect = next(c for c in doc["equivalence"]["comparisons"] if c["kind"] == "effect")
    print(effect["text"])
    # A changed variant must never pass as reproduced. Whether 3 noisy cells per arm on a shared 2-core machine
    # also show it inconsistent (they did on a quiet one) is a matter of power, not of the rule: imprecise is allowed;
    # so is a load client CPU-starved under the parallel suite (it was, in every clean clone's make test and in CI),
    # where kit gives no verdict at all and says why.
    assert r.returncode in (10, 11) and doc["equivalence"]["verdict"] in ("inconsistent", "imprecise"), \
        r.stdout + r.stderr
    text = kit("compare", str(original), str(changed), env=env_of(setup["tmp"])).stdout
    if effect["status"] == "client_bound":
        assert r.returncode == 11 and effect["verdict"] != "reproduced" and "client-bound: no verdict" in text, text
    elif r.returncode == 10:
        assert effect["verdict"] == "inconsistent" and effect["ratio"] < 1  # k0=1 is faster still
        assert "INCONSISTENT  oea vs baseline c=1" in text and "verdict: INCONSISTENT" in text
    else:
        assert effect["verdict"] != "reproduced" and "verdict: IMPRECISE" in text
