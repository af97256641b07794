"""A real two-node Slurm cluster of containers on a Docker bridge network, made by the tests themselves.

One container runs slurmctld (``kctl``), two run slurmd (``knode1``, ``knode2``), each its own host on a
bridge network of its own, all with this machine's munge key (copied in) and one ``slurm.conf`` written
here (``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, ``SelectType=select/cons_tres``).
The image is Debian's slurm-wlm and munge (``scripts/build-base-image``, mmdebstrap: no registry).

Clients run on this machine with ``SLURM_CONF`` pointing at that file (this machine's munged signs their
requests), so ``kit submit`` here queues jobs that run on the containers. What a job needs at the same path
on every node, as on a real cluster's shared storage, is mounted: this checkout (kit and its virtual
environment), the Python installation the environment was made from, and the test's temporary directory
(manifests, trust file, runner key, bundles).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "kit-local/slurm-node:bookworm"
PACKAGES = "python3,slurm-wlm,munge,procps,ca-certificates"
NODES = ("knode1", "knode2")
LABEL = "kit.test=slurm-multinode"  # every container and network made here (removed by stop())
SUBNETS = [f"172.30.{n}.0/24" for n in range(77, 90)]

CONF = """ClusterName=kitmn
SlurmctldHost=kctl({ctl})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=10
SchedulerParameters=defer_batch=0
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""

START = ("install -o munge -g munge -m 400 /kit-munge.key /etc/munge/munge.key && "
         "mkdir -p /run/munge /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm && chown munge /run/munge "
         "&& runuser -u munge -- munged && {daemon} && exec sleep infinity")


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


@dataclass
class ContainerCluster:
    """The controller and two nodes; ``env`` is what a Slurm client here needs to talk to them."""

    workdir: Path  # holds slurm.conf; mounted at the same path
    shared: list[Path]  # mounted read-write at the same path in every node
    network: str = "kit-slurm-multinode"
    ips: dict[str, str] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.workdir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @staticmethod
    def image() -> str:
        p = subprocess.run([str(ROOT / "scripts" / "build-base-image"), IMAGE, PACKAGES], capture_output=True,
                           text=True, timeout=900, check=False)
        if p.returncode != 0:
            raise RuntimeError(f"scripts/build-base-image {IMAGE}: {p.stderr.strip()[-800:]}")
        return p.stdout.strip()

    def start(self, munge_key: Path) -> None:
        self.stop()  # what an earlier, interrupted run left
        image = self.image()
        subnet = self._network()
        base = subnet.rsplit(".", 1)[0]
        self.ips = {"kctl": f"{base}.10", **{n: f"{base}.{11 + i}" for i, n in enumerate(NODES)}}
        nodes = "\n".join(f"NodeName={n} NodeAddr={self.ips[n]} CPUs=2 RealMemory=2000 State=UNKNOWN" for n in NODES)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(CONF.format(ctl=self.ips["kctl"], nodes=nodes))
        mounts = ["-v", f"{self.workdir}:{self.workdir}:ro", "-v", f"{munge_key}:/kit-munge.key:ro"]
        for path in self.shared:
            mounts += ["-v", f"{path}:{path}"]
        for name in ("kctl", *NODES):
            daemon = "slurmctld" if name == "kctl" else "slurmd"
            docker("run", "-d", "--name", name, "--hostname", name, "--label", LABEL, "--network", self.network,
                   "--ip", self.ips[name], "-e", f"SLURM_CONF={self.conf}", *mounts, image, "sh", "-c",
                   START.format(daemon=daemon))
        self.wait_idle()

    def _network(self) -> str:
        for subnet in SUBNETS:
            p = docker("network", "create", "--label", LABEL, "--subnet", subnet, self.network, check=False)
            if p.returncode == 0:
                return subnet
        raise RuntimeError(f"no free subnet for the test network among {SUBNETS[0]}..{SUBNETS[-1]}")

    def wait_idle(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        out = ""
        while time.monotonic() < end:
            p = subprocess.run(["sinfo", "-h", "-o", "%T %D"], capture_output=True, text=True, timeout=10,
                               env={"PATH": "/usr/bin:/bin", **self.env}, check=False)
            out = p.stdout + p.stderr
            if p.returncode == 0 and out.split()[:2] == ["idle", str(len(NODES))]:
                return
            time.sleep(0.3)
        logs = {n: docker("logs", "--tail", "20", n, check=False).stderr[-1500:] for n in ("kctl", *NODES)}
        raise RuntimeError(f"the container cluster is not idle after {timeout} s: sinfo said {out!r}; logs: {logs}")

    def exec(self, node: str, *cmd: str) -> subprocess.CompletedProcess[str]:
        return docker("exec", node, *cmd, check=False)

    def stop(self) -> None:
        ids = docker("ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout.split()
        if ids:
            docker("rm", "-f", *ids, check=False)
        docker("network", "rm", self.network, check=False)


def shared_paths(tmp: Path) -> list[Path]:
    """What the nodes see at the same path: this checkout, the Python installation behind its virtual
    environment (not /usr: the image's own Python 3.11 serves a venv made from Debian's), the test's tmp."""
    paths = [ROOT, tmp]
    base = Path(sys.base_prefix).resolve()
    if base != Path("/usr") and not ROOT.resolve().is_relative_to(base):
        paths.append(base)
    return paths


def available() -> str | None:
    """Why the container cluster cannot be made here (None: it can)."""
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        return "no Docker engine answers"
    if shutil.which("sbatch") is None:
        return "no Slurm client commands on this machine (scripts/ensure-slurm installs them)"
    if not Path("/etc/munge/munge.key").is_file():
        return "no munge key at /etc/munge/munge.key (scripts/ensure-slurm makes one)"
    return None
