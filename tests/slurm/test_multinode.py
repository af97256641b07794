"""A server that spans two nodes (runtime slurm) on a real two-node Slurm cluster of containers
(containers.py): `kit submit` queues the job from this machine, `kit run` runs on the first node and starts one
rank of the demo engine per node as a job step, with the gates of both nodes before every start and after
every stop; killing one rank fails its cell and leaves nothing on either node.

Checked against what kit did not write: Slurm's own squeue (job state, node list, steps) and the processes
in each node's container (``ps`` through ``docker exec``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from containers import ContainerCluster, available, shared_paths
from slurm_helpers import bundles, kit, read_json, submitted_ids, wait_done

from kit.bundle import runner_key, runner_trust_line
from kit.plumbing.poll import poll_until
from kit.slurm import Slurm

pytestmark = [pytest.mark.slow, pytest.mark.docker]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerCluster]:
    why = available()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the two-node container cluster cannot be made: {why}")
        pytest.skip(f"the two-node container cluster cannot be made: {why}")
    shared = tmp_path_factory.mktemp("multinode")
    c = ContainerCluster(shared / "slurm", shared_paths(shared))
    c.start(Path("/etc/munge/munge.key"))
    try:
        yield c
    finally:
        c.stop()


@dataclass(frozen=True)
class Mn:
    env: dict[str, str]
    slurm: Slurm
    trust: Path
    out: Path
    tmp: Path

    def manifest(self, name: str, *, requests: int | None, command: list[str] | None = None, grace: float = 5,
                 output_tokens: int = 8, duration_s: float | None = None) -> Path:
        """experiments/demo-2node.yaml cut to one level and one repeat per arm, renamed (another server
        command, stop grace), signed with the example key."""
        data = yaml.safe_load((ROOT / "experiments" / "demo-2node.yaml").read_text())
        data["name"] = name
        data["server"]["stop_grace_s"] = grace
        if command is not None:
            data["server"]["command"] = command
        data["load"].update(levels=[1], requests_per_level=None if requests is None else [requests], warmup_requests=1,
                            output_tokens=output_tokens, prompt_tokens=8)
        if duration_s is not None:
            data["load"]["arrival"] = {"process": "closed", "duration_s": duration_s}
        data["design"] = {"repeats": 1, "order": "interleaved"}
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        r = kit("sign", str(path), "--key", str(ROOT / "keys" / "example_ed25519"), env=self.env)
        assert r.returncode == 0, r.stderr
        return path

    def submit(self, manifest: Path) -> str:
        r = kit("submit", str(manifest), "--out", str(self.out), "--trust", str(self.trust), env=self.env)
        assert r.returncode == 0, r.stdout + r.stderr
        [job_id] = submitted_ids(r.stdout)
        return job_id


@pytest.fixture
def mn(cluster: ContainerCluster, monkeypatch: pytest.MonkeyPatch) -> Mn:
    """Own config (runner key) and state directories on the nodes' shared storage, no Docker engine for kit,
    and a trust file for the example key's manifests and this runner's bundles."""
    tmp = Path(str(cluster.shared[1])) / os.environ.get("PYTEST_CURRENT_TEST", "t").split("::")[-1].split()[0]
    tmp.mkdir(parents=True, exist_ok=True)
    env = {"XDG_CONFIG_HOME": str(tmp / "config"), "XDG_STATE_HOME": str(tmp / "state"),
           "DOCKER_HOST": f"unix://{tmp}/no-docker.sock", **cluster.env}
    for k in ("XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(k, env[k])
    key, _ = runner_key(None)
    trust = tmp / "allowed_signers"
    trust.write_text((ROOT / "allowed_signers").read_text() + runner_trust_line(key) + "\n")
    return Mn(env=env, slurm=Slurm(env={**os.environ, **cluster.env}), trust=trust, out=tmp / "shared", tmp=tmp)


def engines(cluster: ContainerCluster, node: str) -> list[str]:
    """Every kit.engine process in the node's container, as its ps sees them."""
    out = cluster.exec(node, "ps", "-eo", "pid,args").stdout
    return [line.strip() for line in out.splitlines() if "kit.engine" in line]


def tagged(cluster: ContainerCluster, node: str) -> dict[int, str]:
    """pid -> KIT_RANK of every process in the node's container that has one (read from /proc there)."""
    script = ('for d in /proc/[0-9]*; do t=$(tr "\\0" "\\n" < $d/environ 2>/dev/null | grep "^KIT_RANK="); '
              '[ -n "$t" ] && echo "${d#/proc/} ${t#KIT_RANK=}"; done; true')
    out = cluster.exec(node, "sh", "-c", script).stdout
    return {int(pid): tag for pid, tag in (line.split() for line in out.splitlines() if line.strip())}


KILL_LEVEL_S = 30.0


def kill_rank(cluster: ContainerCluster, node: str, tag_part: str) -> list[int]:
    """SIGKILL every process in the node's container whose KIT_RANK holds tag_part, found and killed in one
    docker exec (so the kill follows the look without a second round trip); the pids killed."""
    script = ('for d in /proc/[0-9]*; do t=$(tr "\\0" "\\n" < $d/environ 2>/dev/null | grep "^KIT_RANK="); '
              f'case "$t" in *"{tag_part}"*) kill -KILL "${{d#/proc/}}" && echo "${{d#/proc/}}";; esac; done; true')
    out = cluster.exec(node, "sh", "-c", script).stdout
    return [int(line) for line in out.split()]


def checks_by_phase(cell_dir: Path) -> dict[str, dict[str, bool]]:
    lines = [yaml.safe_load(line) for line in (cell_dir / "gates.jsonl").read_text().splitlines()]
    return {line["phase"]: {c["name"]: c["ok"] for c in line["checks"]} for line in lines}


def test_two_ranks_on_two_nodes_with_gates_on_both(mn: Mn, cluster: ContainerCluster) -> None:
    job_id = mn.submit(mn.manifest("mn-ab", requests=8))
    [job] = wait_done(job_id, timeout=240, slurm=mn.slurm)
    log = next((mn.out / "slurm").glob(f"*-{job_id}.out")).read_text()
    assert job.state == "COMPLETED" and job.nodes == "knode[1-2]", (job, log[-3000:])
    [b] = bundles(mn.out)
    assert read_json(b / "run.json")["status"] == "complete"
    environment = read_json(b / "environment.json")
    env = environment["slurm"]
    assert env["job_id"] == job_id and env["nodes"] == 2 and env["node_list"] == "knode[1-2]"
    assert environment["runtime"] == {"runtime": "slurm", "job_id": job_id, "nodes": ["knode1", "knode2"],
                                      "launcher": "srun", "container": "none", "container_image": None}
    for cell in ("baseline-r1", "oea-r1"):
        cdir = b / "cells" / cell
        server = read_json(cdir / "server.json")
        assert server["runtime"] == "slurm" and server["job_id"] == job_id
        assert [(r["rank"], r["node"]) for r in server["ranks"]] == [(0, "knode1"), (1, "knode2")]
        assert "--node-rank 1" in " ".join(server["ranks"][1]["command"])
        assert "--dist-init-addr knode1:18091" in " ".join(server["ranks"][1]["command"])
        assert "rank 1 of 2: joined rank 0 at knode1:18091" in (cdir / "server.rank1.log").read_text()
        phases = checks_by_phase(cdir)
        for phase in ("before", "after"):
            names = phases[phase]
            assert all(names.values()), (cell, phase, names)
            assert {"ranks@knode1", "ranks@knode2", "ports@knode1", "rendezvous_port@knode1"} <= set(names)
        stop = read_json(cdir / "cell.json")["stop"]
        assert [r["node"] for r in stop["ranks"]] == ["knode1", "knode2"] and stop["srun_left"] == []
    v = kit("verify", "--trust", str(mn.trust), str(b), env=mn.env)
    assert v.returncode == 0 and "TRUSTED" in v.stdout, v.stdout + v.stderr
    assert engines(cluster, "knode1") == [] and engines(cluster, "knode2") == []


def test_killing_one_rank_fails_the_cell_and_leaves_nothing_on_either_node(mn: Mn, cluster: ContainerCluster) -> None:
    # a time-limited level (KILL_LEVEL_S of load, the second cell runs it all), so that the kill (one docker exec after
    # the first record) lands under load however busy the machine is: 400 requests once ended before it on CI
    job_id = mn.submit(mn.manifest("mn-kill", requests=None, duration_s=KILL_LEVEL_S))

    def first_cell() -> str | None:  # the first cell under load: records are being appended
        found = [p for p in mn.out.glob("*/cells/*/level-*/records.jsonl") if p.stat().st_size > 0]
        return found[0].parents[1].name if found else None

    cell = poll_until(first_cell, 120, interval=0.2)
    assert cell, "no records within 120 s"
    killed = kill_rank(cluster, "knode2", f"/{cell}/1")
    assert len(killed) == 1, (killed, tagged(cluster, "knode2"))  # the rank's one process (it execs nothing)
    [b] = bundles(mn.out)

    def failed_and_next_started() -> bool:  # kit stopped that cell's ranks; the job goes on with the next cell
        cells = [p.parent.name for p in (b / "cells").glob("*/cell.json")]
        return read_json(b / "cells" / cell / "cell.json")["status"] == "failed" and len(cells) == 2

    assert poll_until(failed_and_next_started, 120, interval=0.1), read_json(b / "cells" / cell / "cell.json")
    # now, with the job still running: nothing of the failed cell's ranks on either node, no step of it
    assert [t for n in ("knode1", "knode2") for t in tagged(cluster, n).values() if f"/{cell}/" in t] == []
    assert [n for n in mn.slurm.steps(job_id) if f"-{cell}-" in n] == []
    [job] = wait_done(job_id, timeout=300, slurm=mn.slurm)
    log = next((mn.out / "slurm").glob(f"*-{job_id}.out")).read_text()
    assert job.state == "FAILED", (job, log[-3000:])  # kit run exits 7: a cell's server failed
    assert read_json(b / "run.json")["status"] == "failed"
    state = read_json(b / "cells" / cell / "cell.json")
    assert "rank 1" in state["reason"] and "knode2" in state["reason"], state["reason"]  # the killed rank is named
    starts = [json.loads(line)["wall_start"] for line in (b / "cells" / cell / "level-1" / "records.jsonl").open()]
    assert max(starts) - min(starts) < KILL_LEVEL_S - 1, (min(starts), max(starts))  # ended by the kill, not its time
    after = checks_by_phase(b / "cells" / cell)["after"]
    assert after["ranks@knode1"] and after["ranks@knode2"], after
    other = next(c.name for c in (b / "cells").iterdir() if c.name != cell)
    assert read_json(b / "cells" / other / "cell.json")["status"] == "ok"
    assert all(checks_by_phase(b / "cells" / other)["after"].values())
    v = kit("verify", "--trust", str(mn.trust), str(b), env=mn.env)
    assert v.returncode == 0, v.stdout + v.stderr


def test_a_rank_that_ignores_sigterm_is_killed_through_slurm(mn: Mn, cluster: ContainerCluster) -> None:
    """Rank 1 ignores SIGTERM (a shell that traps it, then sleep): after server.stop_grace_s kit has Slurm
    kill its step (scancel --signal=KILL), and the node gate finds nothing left."""
    engine = ("{python} -m kit.engine --host {host} --port {port} --served-name {served_name} --experts 16 "
              "--top-k 4 --layers 2 --hidden 64 --expert-ffn 64")
    command = ["sh", "-c", f"if [ {{node_rank}} = 0 ]; then exec {engine}; else trap '' TERM; exec sleep 600; fi"]
    job_id = mn.submit(mn.manifest("mn-term", requests=4, command=command, grace=2))
    [job] = wait_done(job_id, timeout=240, slurm=mn.slurm)
    log = next((mn.out / "slurm").glob(f"*-{job_id}.out")).read_text()
    assert job.state == "COMPLETED", (job, log[-3000:])
    [b] = bundles(mn.out)
    for cell in ("baseline-r1", "oea-r1"):
        stop = read_json(b / "cells" / cell / "cell.json")["stop"]
        signals = {r["rank"]: r["signal"] for r in stop["ranks"]}
        assert signals == {0: "SIGTERM", 1: "SIGKILL"}, stop
        assert stop["stop_s"] >= 2 and stop["srun_left"] == []
        assert all(checks_by_phase(b / "cells" / cell)["after"].values())
    assert tagged(cluster, "knode2") == {} and tagged(cluster, "knode1") == {}
