"""The process runtime's cgroup on a GPU host, without the rest of kit (the device has no pydantic): a "server"
started through kit's own start shim (``kit.runtime.subreaper.spawn``, which joins the cgroup before the exec)
leaves a daemon that double-forks, calls setsid, closes its output, drops its environment and holds GPU memory
(torch) and ignores SIGTERM; its leader then dies. Printed as JSON: whether the daemon is in the cgroup (and in
neither the leader's group nor below it), what nvidia-smi says it holds, that ``Cgroup.signal_all(SIGTERM)``
reached it (and left it, as it ignores it), and that ``Cgroup.kill`` ended it and freed its GPU memory.

    python3 benchmarks/cgroup_gpu_probe.py            (from the repository root; prints one JSON object)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kit.plumbing.cgroups import Cgroup, mount_point, own_path

DAEMON = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
import torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB held
torch.cuda.synchronize()
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""
SERVER = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open(os.devnull, os.O_RDWR)
        [os.dup2(fd, i) for i in (0, 1, 2)]
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LD_LIBRARY_PATH", "HOME")}  # no tag, nothing else
        os.execve(sys.executable, [sys.executable, "-c", sys.argv[1], sys.argv[2]], keep)
    os._exit(0)
import time
time.sleep(600)
"""


def gpu_pids() -> dict[int, int]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout
    return {int(p): int(m) for p, m in (line.split(", ") for line in out.splitlines() if ", " in line)}


def main() -> None:
    report: dict[str, object] = {"mount": str(mount_point()), "own": own_path()}
    cgroup, note = Cgroup.create("probe")
    report["cgroup"], report["note"] = (str(cgroup.path) if cgroup else None), note
    if cgroup is None:
        print(json.dumps(report, indent=1))
        return
    pidfile = Path("/tmp/kit-cgroup-probe.pid")
    pidfile.unlink(missing_ok=True)
    try:
        from kit.runtime.subreaper import spawn
        join = cgroup.join_file()
        try:
            leader, failed = spawn([sys.executable, "-c", SERVER, DAEMON, str(pidfile)],
                                   {k: v for k, v in os.environ.items() if k in ("PATH", "LD_LIBRARY_PATH", "HOME")},
                                   join, start_new_session=True)
        finally:
            os.close(join)
        report["shim_join_errno"] = failed
        report["started_through"] = "kit.runtime.subreaper.spawn"
    except ImportError as e:
        report["started_through"] = f"not available here: {e}"
        print(json.dumps(report, indent=1))
        return
    t0 = time.monotonic()
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() - t0 < 120:
        time.sleep(0.1)
    daemon = int(pidfile.read_text())
    report["daemon_ready_s"] = round(time.monotonic() - t0, 2)
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait()
    time.sleep(0.2)
    stat = Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()
    report["daemon"] = {"pid": daemon, "ppid": int(stat[1]), "pgid": int(stat[2]), "leader": leader.pid,
                        "in_cgroup": cgroup.has(daemon), "cgroup_procs": cgroup.procs(),
                        "gpu_mib": gpu_pids().get(daemon)}
    report["sigterm_sent_to"] = cgroup.signal_all(signal.SIGTERM)
    time.sleep(1.0)
    report["after_sigterm_alive"] = Path(f"/proc/{daemon}").exists()
    t1 = time.monotonic()
    report["left_after_kill"] = cgroup.kill()
    report["kill_s"] = round(time.monotonic() - t1, 3)
    deadline = time.monotonic() + 10
    while daemon in gpu_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    report["gpu_pids_after"] = gpu_pids()
    report["removed"] = cgroup.remove()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
