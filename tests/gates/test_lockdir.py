"""The host-wide lock directory (kit.runtime.lockdir) with real files, real flocks and a real second user: made
1777 whatever the umask; a symlinked or foreign directory, a symlinked lock file and a FIFO are refused with the
path and the fix (never followed, never hanging); hostile lock content never crashes a holder message; and a
run of ``nobody`` and a run of root reserve against each other in one directory, each naming the other's user
(the kernel's owner of its run lock), also where root's older port file is not writable by nobody."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from gate_helpers import make_manifest
from support.ports import free_port

from kit.errors import GateFailed
from kit.gates.ports import check_ports
from kit.gates.reserve import holder, reserve, resource_path
from kit.runtime.lockdir import ENV, MAX_INFO, lock_dir
from kit.runtime.records import live_owner, owner_text, read_owner, run_lock_path

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def test_the_directory_is_made_sticky_and_world_writable_whatever_the_umask(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "a" / "locks"))
    old = os.umask(0o077)
    try:
        made = lock_dir()
    finally:
        os.umask(old)
    assert made == tmp_path / "a" / "locks" and stat.S_IMODE(os.lstat(made).st_mode) == 0o1777
    port = free_port()
    old = os.umask(0o077)
    try:
        r = reserve(make_manifest(port=port), "umask1", Path("/b"))
    finally:
        os.umask(old)
    try:
        port_file = resource_path("port", str(port))
        assert stat.S_IMODE(os.stat(port_file).st_mode) == 0o666  # every user can lock it after this run
        assert stat.S_IMODE(os.stat(run_lock_path("umask1")).st_mode) == 0o644  # only its kit writes who runs it
    finally:
        r.release()


def test_a_symlinked_or_foreign_directory_is_refused_naming_the_path_and_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "locks"
    link.symlink_to(target)
    monkeypatch.setenv(ENV, str(link))
    with pytest.raises(GateFailed, match=f"the kit lock directory {link} is a symbolic link") as e:
        reserve(make_manifest(), "r1", Path("/b"))
    assert e.value.hint is not None and ENV in e.value.hint and list(target.iterdir()) == []
    link.unlink()
    link.write_text("")
    with pytest.raises(GateFailed, match="is not a directory"):
        lock_dir()
    link.unlink()
    link.mkdir(mode=0o755)
    os.chown(link, NOBODY, NOBODY)  # another user's, not sticky: that user could swap everyone's locks
    with pytest.raises(GateFailed, match=r"belongs to nobody and is not sticky and world-writable \(mode 0755\)"):
        lock_dir()
    link.chmod(0o1777)  # as /run/lock/kit is when nobody made it first: fine
    assert lock_dir() == link


def test_a_symlinked_lock_file_or_a_fifo_is_refused_not_followed(tmp_path: Path) -> None:
    port = free_port()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    lock_dir().joinpath(f"port-{port}.lock").symlink_to(victim)
    with pytest.raises(GateFailed, match=f"port-{port}.lock is a symbolic link") as e:
        reserve(make_manifest(port=port), "r1", Path("/b"))
    assert victim.read_text() == "precious\n" and ENV in (e.value.hint or "")
    assert not run_lock_path("r1").exists()  # a refusal keeps nothing
    other = free_port()
    os.mkfifo(lock_dir() / f"port-{other}.lock")  # an O_RDONLY open of a FIFO would wait for a writer forever
    with pytest.raises(GateFailed, match=f"port-{other}.lock is not a regular file"):
        reserve(make_manifest(port=other), "r2", Path("/b"))


def test_hostile_lock_content_gives_a_plain_holder_message(tmp_path: Path) -> None:
    """Lock files are writable by every user: a port lock of 10 MB of garbage and a run lock of valid JSON with
    hostile values, both held by a real flock, name 'a run of another kit process' and never crash."""
    port = free_port()
    d = lock_dir()
    port_file, run_file = d / f"port-{port}.lock", d / "run-evil.lock"
    port_file.write_bytes(b"\xff\x00" * (5 * 1024 * 1024))
    run_file.write_text(json.dumps({"run_id": "evil", "pid": 10 ** 400, "ports": "all", "gpus": [1],
                                    "experiment": ["x"], "bundle": "/" * (2 * MAX_INFO)}))
    fds = [os.open(p, os.O_RDWR) for p in (port_file, run_file)]
    try:
        for fd in fds:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        owner = holder("port", str(port))
        assert owner is not None and owner["run_id"] == "?"
        assert owner_text(owner).startswith("a run of another kit process (which run holds ")
        check = check_ports(make_manifest(port=port, port_deadline_s=30))
        assert not check.ok and f"port {port} is reserved by a run of another kit process" in check.message
        assert "kill" not in (check.hint or "") and "leaves a live run alone" in (check.hint or "")
        with pytest.raises(GateFailed, match=f"port {port} is reserved by a run of another kit process"):
            reserve(make_manifest(port=port), "mine", Path("/b"))
    finally:
        for fd in fds:
            os.close(fd)


AS_NOBODY = """
import os, sys
from pathlib import Path
from support.manifests import manifest_data, manifest_model
from kit.errors import GateFailed
from kit.gates.reserve import reserve
from kit.runtime.records import owner_text, live_owner
m = manifest_model(manifest_data("nobodys", port=int(sys.argv[1]), command=["true"], served_name="m"))
if sys.argv[3:] != ["root"]:  # all imported before
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
try:
    r = reserve(m, sys.argv[2], Path("/results/nobodys-bundle"))
except GateFailed as e:
    print("refused", e.message, flush=True)
    sys.exit(5)
print("held", flush=True)
sys.stdin.read()  # until the test closes it
r.release()
"""


@pytest.fixture
def shared_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A lock directory nobody can reach (the per-test one lies under root's 0700 pytest directory)."""
    base = Path(tempfile.mkdtemp(prefix="kit-shared-locks-"))
    base.chmod(0o755)
    monkeypatch.setenv(ENV, str(base / "locks"))
    yield base / "locks"
    shutil.rmtree(base)


def _as_nobody(port: int, run_id: str, *user: str) -> subprocess.Popen[str]:
    """A kit reserving as nobody (``"root"``: as root), until its stdin closes."""
    return subprocess.Popen([sys.executable, "-c", AS_NOBODY, str(port), run_id, *user], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})


@pytest.mark.slow  # two real processes of another user: seconds
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second user")
def test_runs_of_two_users_reserve_against_each_other(shared_dir: Path) -> None:
    port = free_port()
    mine = reserve(make_manifest(port=port), "rootrun", Path("/results/roots-bundle"))  # root makes the directory
    p = _as_nobody(port, "nobodyrun")
    out, err = p.communicate(timeout=60)
    mine.release()
    assert p.returncode == 5, out + err
    assert out.startswith(f"refused port {port} is reserved by run rootrun (kit pid {os.getpid()}, user root, ")
    assert stat.S_IMODE(os.lstat(shared_dir).st_mode) == 0o1777
    # root's port file, made 0644 as an older kit would: nobody can only open it read-only, and still locks it
    port_file = shared_dir / f"port-{port}.lock"
    os.chmod(port_file, 0o644)
    p = _as_nobody(port, "nobodyrun")
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held", p.stderr.read() if p.stderr else ""
        assert os.stat(shared_dir / "run-nobodyrun.lock").st_uid == NOBODY
        with pytest.raises(GateFailed) as e:
            reserve(make_manifest(port=port), "rootrun2", Path("/b"))
        assert e.value.message.startswith(f"port {port} is reserved by run nobodyrun (kit pid {p.pid}, user nobody, "
                                          "experiment nobodys, bundle /results/nobodys-bundle)")
        assert "kill" not in (e.value.hint or "")
    finally:
        p.communicate(timeout=60)
    assert p.returncode == 0
    again = reserve(make_manifest(port=port), "rootrun3", Path("/b"))  # free again once nobody's run ended
    again.release()


def _died_holding(port: int, run_id: str, *user: str) -> None:
    """A kit that took its reservation and was SIGKILLed: its run lock file stays, with its record."""
    p = _as_nobody(port, run_id, *user)
    assert p.stdout is not None and p.stdout.readline().strip() == "held", p.stderr.read() if p.stderr else ""
    p.kill()
    p.communicate(timeout=60)


@pytest.mark.slow  # real processes of two users: seconds
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second user")
def test_a_resume_of_a_dead_kits_run_names_the_live_owner_whoever_ran_it_before(shared_dir: Path) -> None:
    port = free_port()
    lock_dir()  # made by root (mode 1777), as /run/lock/kit is
    _died_holding(port, "deadrun")  # nobody's kit died; root resumes its bundle (the same run id)
    path = shared_dir / "run-deadrun.lock"
    assert os.stat(path).st_uid == NOBODY
    r = reserve(make_manifest(port=port), "deadrun", Path("/results/resumed"))
    try:
        owner, live = read_owner(path), live_owner("deadrun")
        assert owner is not None and (owner["user"], owner["pid"], owner["bundle"]) == ("root", os.getpid(),
                                                                                       "/results/resumed")
        assert live is not None and live["pid"] == os.getpid()
    finally:
        r.release()
    _died_holding(port, "rootdead", "root")  # root's kit died; nobody may neither write nor remove root's file
    p = _as_nobody(port, "rootdead")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 5, out + err
    assert out.startswith("refused run rootdead's lock file ") and "left by a kit of user root that is gone" in out
    owner = read_owner(shared_dir / "run-rootdead.lock")
    assert owner is not None and owner["user"] == "root" and owner["pid"] != p.pid  # nothing taken over
    again = reserve(make_manifest(port=port), "rootdead", Path("/b"))  # root's own resume takes it
    again.release()


SERVING = """
import subprocess, sys
from pathlib import Path
from support.manifests import manifest_data, manifest_model
from kit.gates.reserve import reserve
m = manifest_model(manifest_data("serving", port=int(sys.argv[1]), command=["true"], served_name="m"))
reserve(m, "serving1", Path("/results/serving-bundle"))
server = subprocess.Popen([sys.executable, "-c", "import socket, sys, time; s = socket.socket(); "
                           f"s.bind(('127.0.0.1', {sys.argv[2]})); s.listen(); print('up', flush=True); time.sleep(600)"],
                          start_new_session=True, stdout=subprocess.PIPE, text=True)
assert server.stdout.readline().strip() == "up"
print(server.pid, flush=True)
sys.stdin.read()
server.kill()
"""


@pytest.mark.slow  # two real processes for seconds
def test_a_live_runs_server_on_a_port_it_did_not_reserve_is_named_and_never_to_be_killed() -> None:
    """A port busy with a server of a live kit run (its kit an ancestor, alive, any user) that the run did not
    reserve (here: not in its manifest) is that run's: the port gate names it and says wait, never kill."""
    reserved_port, busy_port = free_port(), free_port()
    p = subprocess.Popen([sys.executable, "-c", SERVING, str(reserved_port), str(busy_port)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    try:
        assert p.stdout is not None
        server = int(p.stdout.readline())
        check = check_ports(make_manifest(port=busy_port))
        assert not check.ok and f"PID {server} " in check.message
        assert f"a server of run serving1 (kit pid {p.pid}, user " in check.message
        assert "kill" not in check.message and "kill" not in (check.hint or "")
        assert check.hint is not None and check.hint.startswith("wait for that run to finish")
        assert list(check.evidence["of_live_runs"]) == [str(server)]
    finally:
        p.communicate(timeout=60)
