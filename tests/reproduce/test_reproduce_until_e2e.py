"""`kit reproduce --until-decided` end to end on kit's own CPU engine (slow tier): a signed demo-like manifest (the
demo's engine, oea at --oea-k0 1 against top-8 at one stream: about -70 % TPOT, so the margin, half the effect, is
wide), run, archived and reproduced with looks after each block. The reproduction stops at the first look that
decides the verdict; `kit verify` of the new bundle recomputes every look; a tampered look fails it (exit 9).

Where it must stop early: a faithful re-run of so large an effect is inside the margin by look 3 of 4 unless a
guardrail withheld the effect at a look (a CPU-starved load client: client-bound, no verdict, which no rule may
decide) or the machine's cell-to-cell noise was large in either run (a pair's log-ratio SD over NOISY); then the
test says which and skips. Any other run to the maximum fails it. Everything else (verify, the tampered look, the
resumes) is checked either way.

`quiet`: `make test` runs it alone after the parallel tiers. Among them (4 workers on 2 cores) its load client was
flagged client-bound at a look in every clean clone of 2026-12-07 and the test skipped its point after 183 s of
CPU, with 32 requests of 32 tokens a cell. Alone, cells of 16 requests of 16 tokens decide at look 2 of 4 (two runs:
57 and 60 s wall, 60 s of CPU)."""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.manifests import engine_command, manifest_data, write_manifest
from support.ports import free_port
from test_reproduce_e2e import DEMO_ENGINE, EXAMPLE_KEY, EXIT, env_of, kit, only

from kit.bundle import Bundle, sign_provenance
from kit.reproduce.sealing import predicate
from kit.signing import SigningKey, generate_key

pytestmark = [pytest.mark.slow, pytest.mark.quiet, pytest.mark.xdist_group("reproduce-until-e2e")]
ROOT = Path(__file__).resolve().parents[2]
REPEATS = 8  # 4 looks
REQUESTS, TOKENS = 16, 16
# a pair's log-ratio SD under which a faithful re-run of a x0.3 effect (margin +-0.6 on the log scale) is decided by
# look 3 of 4 whatever the runs' few per cent of difference (a quiet run here: about 0.08)
NOISY = 0.15


@dataclass(frozen=True)
class Made:
    tar: Path
    policy: Path
    runner: SigningKey
    env: dict[str, str]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    """The original: run, its client-bound cells redone, archived (both tests reproduce it; neither changes it)."""
    tmp = tmp_path_factory.mktemp("until-original")
    m = write_manifest(tmp / "tiny.yaml", manifest_data(
        "tiny", port=free_port(), arms=[{"name": "baseline"}, {"name": "oea", "args": ["--oea-k0", "1"]}],
        command=engine_command(engine_args=DEMO_ENGINE), server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": REQUESTS, "warmup_requests": 2, "prompt_tokens": 8,
              "output_tokens": TOKENS, "seed": 3, "request_timeout_s": 60},
        design={"repeats": REPEATS, "order": "interleaved"}, gates={"port_deadline_s": 5}))
    runner = generate_key(tmp / "runner", "runner@test")
    example = (ROOT / "keys" / "example_ed25519.pub").read_text().split()
    policy = tmp / "policy"
    policy.write_text(f'kit-example namespaces="kit-manifest" {example[0]} {example[1]}\n'
                      f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    env = env_of(tmp)
    assert kit("sign", str(m), "--key", str(EXAMPLE_KEY), env=env).returncode == 0
    r = kit("run", str(m), "--out", str(tmp / "a"), "--trust", str(policy), "--key", str(runner.path), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # an original whose level is client-bound has no verdict to reproduce: re-measure those cells first, as
    # docs/reproduce.md's demo does (nothing to redo: it says so and changes nothing)
    redo = kit("run", "--resume", str(only(tmp / "a")), "--redo", "client-bound", "--trust", str(policy),
               "--key", str(runner.path), env=env)
    assert redo.returncode == 0, redo.stdout + redo.stderr
    tar = tmp / "shared.tar.gz"
    assert kit("archive", str(only(tmp / "a")), "-o", str(tar), env=env).returncode == 0
    return Made(tar, policy, runner, env)


def vouched(root: Path, rel: str) -> bool:
    """Whether a checkpoint's signed statement names ``rel`` (read without kit: the DSSE payload's bytes)."""
    for p in sorted((root / "checkpoints").glob("*.dsse.json")):
        try:
            if rel.encode() in base64.b64decode(json.loads(p.read_bytes())["payload"]):
                return True
        except (ValueError, KeyError):  # a checkpoint being written
            continue
    return False


def killed_after_look_1_then_resumed(made: Made, out: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """SIGKILL (what the OOM killer sends) once look 1 is written and checkpointed; then the printed resume command's
    `kit reproduce SOURCE --resume NEW --until-decided`, which must keep that look byte for byte and take the next
    ones. (One reproduction for both: a second one cost the slow tier two more minutes.) Returns the resume and the
    new bundle."""
    log = out.parent / "kill.log"
    with open(log, "ab") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "kit", "reproduce", str(made.tar), "--until-decided", "--out",
                                 str(out), "--trust", str(made.policy), "--key", str(made.runner.path)],
                                stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **made.env}, cwd=ROOT)
    try:
        deadline = time.monotonic() + 240
        first: Path | None = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(out.glob("*/reproduce-looks/001.json"))
            # and the next cell's server recorded (a kit killed between spawning a server and recording it leaves
            # one its resume cannot know of, whose port then fails the resume's gate: clean clone 2)
            servers = Path(made.env["XDG_STATE_HOME"]) / "kit" / "servers"
            if found and vouched(found[0].parents[1], "reproduce-looks/001.json") and any(servers.glob("*.json")):
                first = found[0]
                break
            time.sleep(0.05)
        assert first is not None and proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    new = first.parents[1]
    kept = first.read_bytes()
    assert not (new / "provenance.dsse.json").exists()  # never sealed: only its checkpoints hold it
    again = kit("reproduce", str(made.tar), "--resume", str(new), "--until-decided", "--trust", str(made.policy),
                "--key", str(made.runner.path), env=made.env)
    assert again.returncode in EXIT.values(), again.stdout + again.stderr  # a verdict, whichever
    assert first.read_bytes() == kept  # the look taken before the kill, as it was
    assert "reproduce look 1 of" not in again.stderr and "reproduce look 2 of" in again.stderr  # continued
    return again, new


def test_until_decided_killed_resumes_stops_verifies_and_a_tampered_look_fails(made: Made, tmp_path: Path) -> None:
    tar, policy, runner, env = made.tar, made.policy, made.runner, made.env
    t0 = time.monotonic()
    rep, new = killed_after_look_1_then_resumed(made, tmp_path / "b")
    wall = time.monotonic() - t0
    report = json.loads((new / "reproduce.json").read_text())
    print(*[line for line in rep.stderr.splitlines() if "reproduce look" in line], rep.stdout[-3000:],
          f"\nwall {wall:.0f} s", sep="\n")
    assert rep.returncode == EXIT[report["verdict"]], rep.stdout + rep.stderr
    looks = [json.loads(p.read_text()) for p in sorted((new / "reproduce-looks").iterdir())]
    last = looks[-1]
    until = report["until_decided"]
    assert until["looks"] == len(looks) == last["look"] >= 2 and until["most_looks"] == REPEATS // 2
    assert last["stop"] in ("decided", "max_repeats") and report["verdict"] == last["verdict"]
    assert f"reproduce look {last['look']} of {REPEATS // 2}" in rep.stderr  # the progress lines
    assert f"until decided: {until['stopped']} ({until['cells_used']} of {2 * REPEATS} planned cells" in rep.stdout
    run = json.loads((new / "run.json").read_text())
    assert run["flags"]["until_decided"] is True and "--until-decided" in run["argv"]
    summary = json.loads((new / "summary.json").read_text())
    not_run = [c["id"] for c in summary["cells"] if c["status"] == "not_run"]
    assert len(not_run) == 2 * REPEATS - until["cells_used"] == 2 * (REPEATS - 2 * last["look"])

    v = kit("verify", str(new), "--trust", str(policy), env=env)
    assert v.returncode == 0, v.stdout + v.stderr
    assert f"{len(looks)} reproduce look(s) recomputed from source/summary.json and the records OK" in v.stdout

    # judged again by a resume with the flag (nothing left to run); refused without it (its looks decided the cells)
    flags = ["--trust", str(policy), "--key", str(runner.path)]
    again = kit("reproduce", str(tar), "--resume", str(new), "--until-decided", *flags, env=env)
    assert again.returncode == rep.returncode, again.stdout + again.stderr
    assert json.loads((new / "reproduce.json").read_text())["comparisons"] == report["comparisons"]
    bare = kit("reproduce", str(tar), "--resume", str(new), *flags, env=env)
    assert bare.returncode == 2 and "started with --until-decided" in bare.stderr, bare.stdout + bare.stderr
    assert kit("verify", str(new), "--trust", str(policy), env=env).returncode == 0

    tampered = tmp_path / "t" / new.name
    tampered.parent.mkdir()
    shutil.copytree(new, tampered)
    p = tampered / "reproduce-looks" / f"{last['look']:03d}.json"
    doc = json.loads(p.read_text())
    doc["comparisons"][0]["p_zero"] = 0.5 if doc["comparisons"][0]["p_zero"] != 0.5 else 0.25
    p.write_text(json.dumps(doc))
    b = Bundle.open(tampered)  # signed again by the runner (an end checkpoint names the changed look): intact
    pieces = predicate(b)
    b.remove_provenance()
    sign_provenance(b, runner, predicate={"externalParameters": pieces.external, "metadata": pieces.metadata,
                                          "internalParameters": pieces.internal,
                                          "resolvedDependencies": pieces.dependencies})
    t = kit("verify", str(tampered), "--trust", str(policy), env=env)
    assert t.returncode == 9, t.stdout + t.stderr
    assert f"reproduce-looks/{last['look']:03d}.json: differs from the look recomputed" in t.stderr, t.stderr
    assert "p_zero" in t.stderr

    c = last["comparisons"][0]  # each run's own SE on its pairs at the last look
    # a pair's log-ratio SD in each run: the original's counts as much as the new one's (CI's run of cde2a84: new
    # 0.09, original 0.56, measured while the other tiers' simulations held the cores; decided at look 4)
    sds = {run: c[f"se_{run}"] * math.sqrt(c["cells"][run]) if c.get(f"se_{run}") else math.inf
           for run in ("original", "new")}
    print(f"a pair's log-ratio SD at look {last['look']}: {sds}")
    if last["look"] < REPEATS // 2:
        assert last["stop"] == "decided" and len(not_run) > 0
        return
    withheld = [c["status"] for d in looks for c in d["comparisons"] if c["status"] != "ok"]
    if withheld:
        pytest.skip(f"a guardrail withheld the effect at a look ({', '.join(sorted(set(withheld)))}): kit gives no "
                    "verdict there, so nothing could stop the run early on this machine")
    noisy = {run: sd for run, sd in sds.items() if sd > NOISY}
    if noisy:
        pytest.skip("the machine's cell-to-cell noise is too large to decide before the maximum: SD of a pair's log "
                    f"ratio {', '.join(f'{sd:.2f} in the {run} run' for run, sd in noisy.items())}, over {NOISY}")
    pytest.fail(f"ran to the maximum with precise cells (pair SD {sds}) and no look withheld: {json.dumps(c)}")
