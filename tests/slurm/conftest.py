"""A real one-node Slurm cluster for this directory's tests, started by the tests themselves.

``slurm_cluster`` (session) runs scripts/ensure-slurm: Debian's slurmctld, slurmd and munge, installed with
apt-get when missing, configured for this host (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
SelectType=select/cons_tres) and started in the background; it answers in well under a second once installed.
The tests are skipped, with the script's own words, only where the cluster cannot be had (no Debian packages).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from slurm_helpers import kit
from support.manifests import engine_command

from kit.bundle import runner_key, runner_trust_line

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Cluster:
    host: str
    partition: str


@pytest.fixture(scope="session")
def slurm_cluster() -> Cluster:
    if not shutil.which("apt-get") and not shutil.which("sbatch"):
        pytest.skip("no Slurm and no apt-get to install Debian's slurm-wlm and munge")
    p = subprocess.run([str(ROOT / "scripts" / "ensure-slurm")], capture_output=True, text=True, timeout=600,
                       check=False)
    if p.returncode != 0:
        pytest.skip(f"scripts/ensure-slurm could not start a one-node Slurm cluster: {p.stderr.strip()[-500:]}")
    info = subprocess.run(["sinfo", "-h", "-o", "%N %P"], capture_output=True, text=True, timeout=30, check=True)
    host, partition = info.stdout.split()[:2]
    return Cluster(host=host, partition=partition.rstrip("*"))


@dataclass(frozen=True)
class Setup:
    env: dict[str, str]
    trust: Path  # the repo's allowed_signers (the example key, kit-manifest) + this test's runner (kit-bundle)
    out: Path
    tmp: Path

    def manifest(self, name: str, port: int, *, requests: int = 6) -> Path:
        """experiments/demo.yaml cut to one level, a few requests, one repeat per arm and the tests' smaller
        engine (a few seconds per cell), renamed, signed with the example key."""
        data = yaml.safe_load((ROOT / "experiments" / "demo.yaml").read_text())
        data["name"] = name
        data["server"]["port"] = port
        data["server"]["command"] = engine_command()
        data["load"].update(levels=[1], requests_per_level=[requests], warmup_requests=1, output_tokens=8,
                            prompt_tokens=8)
        data["design"] = {"repeats": 1, "order": "interleaved"}
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        r = kit("sign", str(path), "--key", str(ROOT / "keys" / "example_ed25519"), env=self.env)
        assert r.returncode == 0, r.stderr
        return path


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm_cluster: Cluster) -> Iterator[Setup]:
    """Own config (runner key) and state directories, no Docker engine (as tests/e2e's ``isolated``), and a
    trust file that approves the example key's manifests and this runner's bundles (for --resume, verify)."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    key, _ = runner_key(None)
    trust = tmp_path / "allowed_signers"
    trust.write_text((ROOT / "allowed_signers").read_text() + runner_trust_line(key) + "\n")
    yield Setup(env=env, trust=trust, out=tmp_path / "shared", tmp=tmp_path)
