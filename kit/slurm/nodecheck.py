"""The gates on every node of a Slurm allocation, for servers that span nodes (runtime slurm).

``node_gates`` runs ``python -P -m kit.slurm.nodecheck`` as one job step with a task on each node; each node
checks itself and prints one JSON line (its node name and its checks), which ``node_gates`` turns into
checks named ``<gate>@<node>`` beside the local gates of the cell:

- ``gpu@NODE``: the GPU gate for the node's GPUs (``hardware.gpus_per_node``, or all of them when
  ``hardware.gpus`` is 'all'), when the manifest uses GPUs;
- ``ports@NODE``: server.extra_ports and gates.ports free on every node, and on the first node (rank 0's)
  also server.port on server.host and ranks.dist_init_port on every interface;
- ``ranks@NODE``: no process left that carries a rank tag of this job (``KIT_RANK=JOB/RUN/CELL/R`` in its
  environment, which every rank's step gets and its children inherit), waiting up to gates.port_deadline_s
  for one that is still exiting; each one found is named with its PID and command line. Ranks of other jobs
  (a node shared with ``kit submit --shared``) and processes whose environment cannot be read (another
  user's) are counted in the evidence, not blocking: the GPU and port gates still see what they hold.

The node is given the verified manifest itself (its JSON on the command line), never a path to read again.
Each node's report is one line after a marker, so other output of the step cannot be taken for it.
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
from kit.manifest import Manifest
from kit.nvml import NvmlProbe
from kit.plumbing.jsontypes import loads_at
from kit.plumbing.poll import poll_until
from kit.slurm.commands import Slurm

RANK_TAG = "KIT_RANK"  # JOB/RUN/CELL/RANK in the environment of every rank (kit.slurm.ranks sets it)
MARKER = "kit-node-gates: "  # before each node's report in the step's output
NODE_SLACK_S = 60.0  # beyond the gates' own deadlines, for the step to start on every node
_ENVIRON_MAX = 1 << 20


def rank_tag(job_id: str, run_id: str, cell: str, rank: int) -> str:
    return f"{job_id}/{run_id}/{cell}/{rank}"


def node_name() -> str:
    """This node's name as Slurm knows it (SLURMD_NODENAME in a job step), else the short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def rank_processes(proc: Path = PROC, *, exclude: Sequence[int] = ()) -> tuple[list[tuple[int, str]], int]:
    """(pid, tag) of every process whose environment carries a kit rank's tag, and how many processes'
    environments could not be read (another user's; gone ones are not counted)."""
    needle = f"{RANK_TAG}=".encode()
    found = []
    unreadable = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            with (entry / "environ").open("rb") as f:
                data = f.read(_ENVIRON_MAX)
        except FileNotFoundError:
            continue
        except OSError:
            unreadable += 1
            continue
        for item in data.split(b"\0"):
            if item.startswith(needle):
                found.append((int(entry.name), item[len(needle):].decode("utf-8", "replace")))
                break
    return found, unreadable


def check_ranks(deadline_s: float, job_id: str, proc: Path = PROC) -> Check:
    """No process of a rank of job ``job_id`` left on this node (see the module's docstring)."""
    timer = Timer()
    mine = [os.getpid(), os.getppid()]
    left: list[tuple[int, str]] = []
    others: list[tuple[int, str]] = []
    unreadable = 0

    def gone() -> bool:
        nonlocal left, others, unreadable
        found, unreadable = rank_processes(proc, exclude=mine)
        left = [(pid, tag) for pid, tag in found if tag.startswith(f"{job_id}/")]
        others = [(pid, tag) for pid, tag in found if not tag.startswith(f"{job_id}/")]
        return not left

    poll_until(gone, deadline_s, interval=0.05, backoff=1.5, max_interval=1.0)
    evidence = {"tag": RANK_TAG, "job_id": job_id, "deadline_s": deadline_s, "unreadable": unreadable,
                "processes": [{"tag": tag, **describe(pid)} for pid, tag in left],
                "other_jobs": [{"tag": tag, **describe(pid)} for pid, tag in others]}
    if not left:
        note = f" ({len(others)} of other jobs, not blocking)" if others else ""
        return timer.check("ranks", True, f"no process of a rank of job {job_id} left{note}", None, evidence)
    parts = [f"{short(describe(pid))} (rank {tag}), command: {describe(pid)['cmdline']}" for pid, tag in left]
    pids = " ".join(str(pid) for pid, _ in left)
    return timer.check("ranks", False, f"{len(left)} kit rank process(es) still running: " + "; ".join(parts),
                       f"kill -KILL {pids} on this node, or scancel the job", evidence)


def node_manifest(m: Manifest) -> Manifest:
    """The manifest as one node sees it: hardware.gpus is the node's share."""
    hw = m.hardware
    per_node = hw.gpus_per_node if hw.gpus_per_node is not None else hw.gpus
    return m.model_copy(update={"hardware": hw.model_copy(update={"gpus": per_node})})


def checks_here(m: Manifest, *, head: bool, job_id: str) -> list[Check]:
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
    out.append(check_ranks(m.gates.port_deadline_s, job_id))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kit.slurm.nodecheck", description=__doc__.splitlines()[0])
    p.add_argument("--manifest-json", required=True, help="the verified manifest, as JSON")
    p.add_argument("--head", required=True, help="the first node of the allocation (rank 0's)")
    p.add_argument("--job", required=True, help="the Slurm job whose ranks are looked for")
    args = p.parse_args(argv)
    node = node_name()
    try:
        m = Manifest.model_validate_json(args.manifest_json)
        checks = [vars(c) for c in checks_here(m, head=node == args.head, job_id=args.job)]
    except Exception as e:  # noqa: BLE001 - one node's failure is its report, never the loss of the others'
        hint = e.hint if isinstance(e, KitError) else f"python -P -m kit.slurm.nodecheck on {node} failed"
        checks = [vars(Timer().check("node", False, f"{type(e).__name__}: {e}", hint, {}))]
    sys.stdout.write(MARKER + json.dumps({"node": node, "checks": checks}, default=str) + "\n")
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


def report_of(text: str) -> dict[str, object] | None:
    """The node's report in its output (the JSON after the last marker; anything after it is ignored)."""
    at = text.rfind(MARKER)
    if at < 0:
        return None
    try:
        report = loads_at(text, at + len(MARKER))
    except ValueError:  # TooDeep too
        return None
    return report if isinstance(report, dict) else None


def node_gates(m: Manifest, slurm: Slurm, *, job_id: str, nodes: Sequence[str], step_name: str) -> list[Check]:
    """The gates of every node, as one job step (a task per node); a node that does not report fails."""
    timer = Timer()
    # what the first node runs at most (GPU, three port checks, the ranks' wait), and the step's start
    deadline = m.gates.gpu_deadline_s + 3 * m.gates.port_deadline_s + NODE_SLACK_S
    opts = [f"--jobid={job_id}", "--overlap", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", f"--job-name={step_name}", "--label",
            "--kill-on-bad-exit=0"]
    cmd = [sys.executable, "-P", "-m", "kit.slurm.nodecheck", "--manifest-json", m.model_dump_json(), "--head",
           nodes[0], "--job", job_id]
    t0 = time.monotonic()
    try:
        out = slurm.srun(opts, cmd, timeout_s=deadline, check=False)  # a node's failure is in its own report
    except KitError as e:
        return [timer.check("nodes", False, f"the gates could not run on the nodes ({', '.join(nodes)}): {e.message}",
                            e.hint, {"nodes": list(nodes), "waited_s": round(time.monotonic() - t0, 3)})]
    answers: dict[str, list[Check]] = {}
    for text in parse_labelled(out).values():
        report = report_of(text)
        listed = report.get("checks") if report is not None else None
        try:
            if report is not None and isinstance(listed, list):
                answers[str(report["node"])] = [Check(**c) for c in listed]
        except (KeyError, TypeError):
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
