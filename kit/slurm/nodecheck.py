"""The gates on every node of a Slurm allocation, for servers that span nodes (runtime slurm).

``node_gates`` runs ``python -P -m kit.slurm.nodecheck`` as one job step with a task on each node; each node
checks itself and prints one JSON line (its node name and its checks), which ``node_gates`` turns into
checks named ``<gate>@<node>`` beside the local gates of the cell:

- ``gpu@NODE``: the GPU gate for the node's GPUs (``hardware.gpus_per_node``, or all of them when
  ``hardware.gpus`` is 'all'), when the manifest uses GPUs;
- ``ports@NODE``: server.extra_ports and gates.ports free on every node, and on the first node (rank 0's)
  also server.port on server.host and ranks.dist_init_port on every interface;
- ``ranks@NODE``: no process left that carries a kit rank's tag (``KIT_RANK`` in its environment, which
  every rank's step gets and its children inherit), waiting up to gates.port_deadline_s for one that is
  still exiting; each one found is named with its PID and command line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kit.errors import KitError
from kit.gates.gpu import check_gpus
from kit.gates.ports import check_ports
from kit.gates.procinfo import PROC, describe, short
from kit.gates.result import Check, Timer
from kit.manifest import Manifest, load_manifest
from kit.nvml import NvmlProbe
from kit.plumbing.poll import poll_until
from kit.slurm.commands import Slurm

RANK_TAG = "KIT_RANK"  # RUN/CELL/RANK in the environment of every rank (kit.slurm.ranks sets it)
NODE_SLACK_S = 60.0  # beyond the gates' own deadlines, for the step to start on every node
_ENVIRON_MAX = 1 << 20


def node_name() -> str:
    """This node's name as Slurm knows it (SLURMD_NODENAME in a job step), else the short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def rank_processes(proc: Path = PROC, *, exclude: Sequence[int] = ()) -> list[tuple[int, str]]:
    """(pid, tag) of every process whose environment carries a kit rank's tag (those this user may read)."""
    needle = f"{RANK_TAG}=".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            with (entry / "environ").open("rb") as f:
                data = f.read(_ENVIRON_MAX)
        except OSError:
            continue  # gone, or another user's
        for item in data.split(b"\0"):
            if item.startswith(needle):
                found.append((int(entry.name), item[len(needle):].decode("utf-8", "replace")))
                break
    return found


def check_ranks(deadline_s: float, proc: Path = PROC) -> Check:
    timer = Timer()
    mine = [os.getpid(), os.getppid()]
    left: list[tuple[int, str]] = []

    def gone() -> bool:
        nonlocal left
        left = rank_processes(proc, exclude=mine)
        return not left

    poll_until(gone, deadline_s, interval=0.05, backoff=1.5, max_interval=1.0)
    evidence = {"tag": RANK_TAG, "deadline_s": deadline_s,
                "processes": [{"tag": tag, **describe(pid)} for pid, tag in left]}
    if not left:
        return timer.check("ranks", True, "no kit rank process left", None, evidence)
    parts = [f"{short(describe(pid))} (rank {tag}), command: {describe(pid)['cmdline']}" for pid, tag in left]
    pids = " ".join(str(pid) for pid, _ in left)
    return timer.check("ranks", False, f"{len(left)} kit rank process(es) still running: " + "; ".join(parts),
                       f"kill -KILL {pids} on this node, or scancel the job", evidence)


def node_manifest(m: Manifest) -> Manifest:
    """The manifest as one node sees it: hardware.gpus is the node's share."""
    hw = m.hardware
    per_node = hw.gpus_per_node if hw.gpus_per_node is not None else hw.gpus
    return m.model_copy(update={"hardware": hw.model_copy(update={"gpus": per_node})})


def checks_here(m: Manifest, *, head: bool) -> list[Check]:
    """Every gate of this node (see the module's docstring)."""
    nm = node_manifest(m)
    out: list[Check] = []
    if nm.hardware.gpus:
        out.append(check_gpus(nm, NvmlProbe())[0])
    others = [*m.server.extra_ports, *m.gates.ports]
    if head:
        out.append(check_ports(m, ports=[m.server.port, *others]))
        out.append(check_ports(m, ports=[m.ranks.dist_init_port], host="0.0.0.0", name="rendezvous_port"))
    elif others:
        out.append(check_ports(m, ports=others, host="0.0.0.0"))
    out.append(check_ranks(m.gates.port_deadline_s))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kit.slurm.nodecheck", description=__doc__.splitlines()[0])
    p.add_argument("--manifest", type=Path, required=True, help="the bundle's manifest.yaml (already verified)")
    p.add_argument("--head", required=True, help="the first node of the allocation (rank 0's)")
    args = p.parse_args(argv)
    node = node_name()
    try:
        m = load_manifest(args.manifest, allow_unpinned=True).manifest
        checks = [vars(c) for c in checks_here(m, head=node == args.head)]
    except KitError as e:
        timer = Timer()
        checks = [vars(timer.check("node", False, e.message, e.hint, {}))]
    sys.stdout.write(json.dumps({"node": node, "checks": checks}, default=str) + "\n")
    sys.stdout.flush()
    return 0


def parse_labelled(out: str) -> dict[int, str]:
    """``srun --label`` output as each task's text: srun prefixes every piece ("N: ...", at most 1024 bytes
    of a line) with the task's number, so a task's pieces joined in order are what it printed."""
    texts: dict[int, list[str]] = {}
    for line in out.splitlines():
        task, sep, rest = line.partition(": ")
        if sep and task.strip().isdigit():
            texts.setdefault(int(task), []).append(rest)
    return {task: "".join(parts) for task, parts in texts.items()}


def node_gates(m: Manifest, slurm: Slurm, *, job_id: str, nodes: Sequence[str], manifest_path: Path,
               step_name: str) -> list[Check]:
    """The gates of every node, as one job step (a task per node); a node that does not answer fails."""
    timer = Timer()
    deadline = m.gates.gpu_deadline_s + 2 * m.gates.port_deadline_s + NODE_SLACK_S
    opts = [f"--jobid={job_id}", "--overlap", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", f"--job-name={step_name}", "--label",
            "--kill-on-bad-exit=0"]
    cmd = [sys.executable, "-P", "-m", "kit.slurm.nodecheck", "--manifest", str(manifest_path), "--head", nodes[0]]
    t0 = time.monotonic()
    try:
        out = slurm.srun(opts, cmd, timeout_s=deadline)
    except KitError as e:
        return [timer.check("nodes", False, f"the gates could not run on the nodes ({', '.join(nodes)}): {e.message}",
                            e.hint, {"nodes": list(nodes), "waited_s": round(time.monotonic() - t0, 3)})]
    answers: dict[str, list[Check]] = {}
    for text in parse_labelled(out).values():
        try:
            line = json.loads(text)
            answers[str(line["node"])] = [Check(**c) for c in line["checks"]]
        except (ValueError, KeyError, TypeError):
            continue
    checks: list[Check] = []
    for node in nodes:
        if node not in answers:
            checks.append(timer.check(f"node@{node}", False, f"node {node} gave no gate report",
                                      f"see the job's output; is kit installed at {sys.executable} on {node}?",
                                      {"output": out[-2000:]}))
            continue
        for c in answers[node]:
            checks.append(Check(f"{c.name}@{node}", c.ok, f"{node}: {c.message}", c.hint, c.evidence, c.started,
                                c.duration_s))
    return checks


if __name__ == "__main__":
    raise SystemExit(main())
