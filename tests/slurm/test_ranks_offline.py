"""Runtime slurm without a cluster: what the manifest accepts, each rank's command, the srun options (pyxis
too), the node gates' parts (rank processes found by their tag in real processes' environments, srun's
labelled output put back together), and the demo engine's ranks as real processes on this machine. The
real two-node cluster is tests/slurm/test_multinode.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from pydantic import ValidationError
from slurm_helpers import kit
from support.manifests import manifest_data, manifest_model
from support.ports import free_port

from kit.errors import UsageError
from kit.plan import Cell
from kit.plumbing.poll import poll_until
from kit.server_spec import server_spec
from kit.slurm import Slurm
from kit.slurm.nodecheck import MARKER, RANK_TAG, check_ranks, parse_labelled, rank_processes, report_of
from kit.slurm.ranks import AllocationNodes, SlurmRanksRuntime, allocation_nodes

ROOT = Path(__file__).resolve().parents[2]
RANKED = ["{python}", "-m", "kit.engine", "--port", "{port}", "--nnodes", "{nnodes}", "--node-rank", "{node_rank}",
          "--dist-init-addr", "{dist_init_addr}"]


def ranked(**over: object) -> dict[str, object]:
    data = manifest_data("ranked")
    data["runtime"] = "slurm"
    data["hardware"] = {"nodes": 3}
    data["server"] = {**data["server"], "command": RANKED, "port": 18090}  # type: ignore[dict-item]
    data["ranks"] = {"dist_init_port": 18091}
    data.update(over)
    return data


@pytest.mark.parametrize(("over", "says"), [
    ({"runtime": "process"}, "hardware.nodes is 3 but runtime is process"),
    ({"ranks": {"dist_init_port": 18090}}, "ranks.dist_init_port 18090 is also server.port"),
    ({"server": {"command": RANKED, "port": 18090, "cpus": "0"}}, "server.cpus pins a server kit starts here"),
    ({"ranks": {"container": "pyxis"}}, "ranks.container is pyxis but ranks.container_image is not set"),
    ({"ranks": {"container_image": "/sq/img.sqsh"}}, "need ranks.container: pyxis"),
    ({"ranks": {"container": "pyxis", "container_image": "x", "container_mounts": ["data:/data"]}}, "/SRC:/DST"),
    ({"arms": [{"name": "a", "image": {"context": "images/engine", "base": "sha256:" + "0" * 64}}, {"name": "b"}]},
     "runtime slurm starts no kit-built image"),
])
def test_what_a_manifest_of_ranks_must_agree_on(over: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says.replace(".", r"\.")):
        manifest_model(ranked(**over))


@pytest.mark.slow  # spawns kit (~2 s)
def test_a_manifest_that_disagrees_is_exit_3_naming_the_field(tmp_path: Path) -> None:
    from support.manifests import write_manifest

    path = write_manifest(tmp_path / "m.yaml", ranked(runtime="process"))
    r = kit("validate", str(path))
    assert r.returncode == 3 and "hardware.nodes is 3 but runtime is process" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_each_rank_gets_its_own_command() -> None:
    m = manifest_model(ranked())
    spec = server_spec(m, Cell(0, "baseline", 1), "run1", Path("/tmp/x/server.log"), nodes=["gpu07", "gpu08", "gpu11"])
    assert [(r.rank, r.host) for r in spec.ranks] == [(0, "gpu07"), (1, "gpu08"), (2, "gpu11")]
    for r in spec.ranks:
        argv = r.command
        assert argv[argv.index("--node-rank") + 1] == str(r.rank)
        assert argv[argv.index("--nnodes") + 1] == "3"
        assert argv[argv.index("--dist-init-addr") + 1] == "gpu07:18091"
    assert spec.command == spec.ranks[0].command
    with pytest.raises(Exception, match=r"hardware\.nodes is 3 but the allocation has 2 node"):
        server_spec(m, Cell(0, "baseline", 1), "run1", Path("/tmp/x/server.log"), nodes=["a", "b"])
    one = server_spec(manifest_model({**manifest_data("one"), "server": {**manifest_data("one")["server"],  # type: ignore[dict-item]
                                                                          "command": RANKED}}),
                      Cell(0, "baseline", 1), "run1", Path("/tmp/x/server.log"))
    assert one.ranks == () and one.command[one.command.index("--nnodes") + 1] == "1"
    assert one.command[one.command.index("--dist-init-addr") + 1] == "127.0.0.1:29500"


def test_srun_options_of_a_rank_process_and_pyxis(tmp_path: Path) -> None:
    alloc = AllocationNodes("42", ["n1", "n2", "n3"])
    m = manifest_model(ranked())
    spec = server_spec(m, Cell(0, "baseline", 1), "r", tmp_path / "server.log", nodes=alloc.nodes)
    opts = SlurmRanksRuntime(m, Slurm(), alloc).step_options(spec.ranks[2], "kit-rank-r-c-2", tmp_path)
    assert opts == ["--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=n3", "--job-name=kit-rank-r-c-2",
                    "--kill-on-bad-exit=1", "--export=ALL", f"--chdir={tmp_path}"]
    model = tmp_path / "model"
    model.mkdir()
    pm = manifest_model(ranked(ranks={"container": "pyxis", "container_image": "/shared/sglang.sqsh",
                                      "container_mounts": ["/data:/data:ro"]},
                               model={"served_name": "m", "path": str(model)}))
    popts = SlurmRanksRuntime(pm, Slurm(), alloc).step_options(spec.ranks[0], "s", tmp_path)
    assert "--container-image=/shared/sglang.sqsh" in popts
    assert f"--container-mounts=/data:/data:ro,{model}:{model}:ro" in popts


def test_outside_an_allocation_kit_says_so_and_how_to_run_it() -> None:
    m = manifest_model(ranked())
    with pytest.raises(UsageError, match="not a Slurm job") as e:
        allocation_nodes(m, Slurm(), environ={})
    assert "kit submit" in (e.value.hint or "")


@pytest.mark.slow  # spawns kit (~2 s)
def test_kit_run_of_a_ranked_manifest_outside_an_allocation_is_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update({"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")})
    r = subprocess.run([sys.executable, "-m", "kit", "run", "--trust", str(ROOT / "allowed_signers"), "--out",
                        str(tmp_path / "out"), str(ROOT / "experiments" / "demo-2node.yaml")],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "not a Slurm job" in r.stderr and "kit submit" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing started or written


@pytest.mark.slow  # spawns kit (~2 s)
def test_kit_plan_shows_every_rank_and_the_gates_of_every_node() -> None:
    r = kit("plan", str(ROOT / "experiments" / "demo-2node.yaml"))
    assert r.returncode == 0, r.stderr
    assert "rank 0 on NODE0:" in r.stdout and "rank 1 on NODE1:" in r.stdout
    assert "--node-rank 1 --dist-init-addr NODE0:18091" in r.stdout
    assert "on each of the 2 nodes" in r.stdout and "no process of a kit rank left" in r.stdout
    assert "ranks: one per node (2), each a job step as a process" in r.stdout
    assert "--nodes=2" in r.stdout


def test_rank_processes_are_found_by_their_tag_and_named() -> None:
    job = f"9{os.getpid()}"
    tag = f"{job}/run/cell/1"
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, RANK_TAG: f"1{job}/run/cell/0"})  # another job
    p = subprocess.Popen(["sleep", "60"], env={**os.environ, RANK_TAG: tag})
    try:
        assert (p.pid, tag) in rank_processes()[0]
        held = check_ranks(0.2, job)
        assert not held.ok and f"PID {p.pid}" in held.message and tag in held.message and "sleep" in held.message
        assert f"kill -KILL {p.pid}" in (held.hint or "") and str(other.pid) not in (held.hint or "")
    finally:
        p.kill()
        p.wait()
    try:
        passed = check_ranks(0.2, job)  # another job's rank is evidence, never a reason to kill it
        # other tests' tagged processes may be alive too (the sibling test below, on the other xdist worker, once
        # made it "2 of other jobs"): the other job's rank is among them, and none is a reason to fail
        assert passed.ok and "of other jobs, not blocking" in passed.message, passed.message
        assert other.pid in [x["pid"] for x in passed.evidence["other_jobs"]]  # type: ignore[index, union-attr]
    finally:
        other.kill()
        other.wait()


def test_a_rank_exiting_during_the_wait_passes_the_gate() -> None:
    p = subprocess.Popen(["sleep", "0.5"], env={**os.environ, RANK_TAG: "77/y/z/1"})
    try:
        check = check_ranks(10.0, "77")
        assert check.ok, check.message
    finally:
        p.kill()
        p.wait()


def test_srun_labelled_output_is_put_back_together_and_the_report_found_in_noise() -> None:
    report = '{"node": "n1", "checks": [' + ", ".join(['{"name": "x"}'] * 200) + "]}"
    text0 = "a library printed this\n" + MARKER + report
    # as srun --label writes a task's output: each line, in pieces of at most 1024 bytes, each piece labelled
    pieces0 = [ln[i:i + 1024] for ln in text0.split("\n") for i in range(0, len(ln), 1024)]
    lines = [f"0: {pieces0[0]}", f"1: {MARKER}{{}}", *[f"0: {p}" for p in pieces0[1:]], "srun: some notice",
             "0: and this after it"]
    texts = parse_labelled("\n".join(lines) + "\n")
    assert report_of(texts[0]) == json.loads(report)
    assert report_of(texts[1]) == {} and report_of("no marker here") is None
    assert report_of(MARKER + '{"node": "n1", "checks": [trunc') is None


def http_status(url: str) -> int | None:
    """The HTTP status the URL answers with (None: nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError):
        return None


def _engine(port: int, rank: int, dist: int, tmp: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "kit.engine", "--port", str(port), "--experts", "8", "--top-k", "2", "--layers", "1",
           "--hidden", "32", "--expert-ffn", "32", "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr",
           f"127.0.0.1:{dist}"]
    return subprocess.Popen(cmd, stdout=(tmp / f"r{rank}.log").open("wb"), stderr=subprocess.STDOUT, cwd=tmp)


@pytest.mark.parametrize("kill", ["rank1", "rank0", "term-rank1"])
def test_the_demo_engine_is_ready_only_with_every_rank_and_ends_when_one_leaves(tmp_path: Path, kill: str) -> None:
    port, dist = free_port(), free_port()
    r0 = _engine(port, 0, dist, tmp_path)
    try:
        assert poll_until(lambda: http_status(f"http://127.0.0.1:{port}/health") == 503, 30, interval=0.05), \
            (tmp_path / "r0.log").read_text()
        time.sleep(0.3)
        assert http_status(f"http://127.0.0.1:{port}/health") == 503  # still waiting for rank 1
        r1 = _engine(0, 1, dist, tmp_path)
        try:
            assert poll_until(lambda: http_status(f"http://127.0.0.1:{port}/health") == 200, 30, interval=0.05)
            if kill == "rank1":
                r1.send_signal(signal.SIGKILL)
                assert r0.wait(timeout=15) == 1  # rank 0 saw rank 1 leave
                assert "rank 1 left" in (tmp_path / "r0.log").read_text()
            elif kill == "rank0":
                r0.send_signal(signal.SIGTERM)
                assert r0.wait(timeout=15) == 0
                assert r1.wait(timeout=15) == 1  # rank 1 saw rank 0 leave
            else:  # rank 1 told to stop says so: rank 0 stops as cleanly
                r1.send_signal(signal.SIGTERM)
                assert r1.wait(timeout=15) == 0
                assert r0.wait(timeout=15) == 0
                assert "rank 1 was stopped" in (tmp_path / "r0.log").read_text()
        finally:
            r1.kill()
            r1.wait()
    finally:
        r0.kill()
        r0.wait()


def test_pyxis_is_refused_where_srun_has_no_container_image_option() -> None:
    """This machine's srun (Debian's Slurm 22.05, no pyxis plugin) offers --container (OCI) but not
    --container-image: a pyxis manifest stops before anything starts, saying why."""
    if shutil.which("srun") is None:
        pytest.skip("no srun here (scripts/ensure-slurm installs it)")
    slurm = Slurm()
    assert slurm.srun_offers("--nodelist") and not slurm.srun_offers("--container-image")
    m = manifest_model(ranked(ranks={"container": "pyxis", "container_image": "/shared/x.sqsh"}))

    class ThreeNodes(Slurm):  # the job's node list as scontrol would expand it (no job here)
        def hostnames(self, nodelist: str) -> list[str]:
            return ["n1", "n2", "n3"]

    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]", "SLURMD_NODENAME": "n1"}
    with pytest.raises(UsageError, match="no --container-image option") as e:
        SlurmRanksRuntime.from_environment(m, ThreeNodes(), env)
    assert "ranks.container: none" in (e.value.hint or "")
    assert SlurmRanksRuntime.from_environment(manifest_model(ranked()), ThreeNodes(), env).nodes == ["n1", "n2", "n3"]
    with pytest.raises(UsageError, match="goes on the allocation's first node n1"):
        SlurmRanksRuntime.from_environment(manifest_model(ranked()), ThreeNodes(), {**env, "SLURMD_NODENAME": "n2"})
