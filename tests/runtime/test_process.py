from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from kit.errors import ServerError
from kit.plumbing.net import port_bindable
from kit.plumbing.procs import group_members
from kit.runtime import ServerSpec
from kit.runtime.process import ProcessRuntime


def _spec(tmp_path: Path, port: int, command: list[str], **kw: object) -> ServerSpec:
    base: dict[str, object] = dict(
        name="t", arm="a", command=command, env={}, secret_env={}, host="127.0.0.1", port=port,
        readiness_path="/", ready_timeout_s=20, stop_grace_s=2, log_path=tmp_path / "server.log",
        labels={"kit.run": "test", "kit.cell": "a-r1"},
    )
    base.update(kw)
    return ServerSpec(**base)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_start_ready_stop_frees_port_and_group(tmp_path: Path, port: int) -> None:
    # a parent that forks a child which ignores SIGTERM: stop must still leave nothing
    script = (
        "import os, signal, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        " time.sleep(600)'])\n"
        f"os.execvp(sys.executable, [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n"
    )
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", script]))
    assert server.wait_ready() < 20
    records = list((tmp_path / "state/kit/servers").glob("*.json"))
    assert len(records) == 1
    pgid = server.pgid
    time.sleep(0.3)
    assert len(group_members(pgid)) == 2
    info = server.stop()
    assert info.signal == "SIGKILL"  # the child ignored SIGTERM for the whole grace period
    assert group_members(pgid) == []
    assert port_bindable("127.0.0.1", port)
    assert info.details["port_free_after_stop"] is True
    assert not records[0].exists()
    assert server.stop() is info  # idempotent


def test_exit_during_startup_fails_fast_with_log_tail(tmp_path: Path, port: int) -> None:
    cmd = [sys.executable, "-c", "import sys; print('loading weights'); print('CUDA out of memory', file=sys.stderr);"
           " sys.exit(3)"]
    server = ProcessRuntime().start(_spec(tmp_path, port, cmd))
    t = time.monotonic()
    with pytest.raises(ServerError) as e:
        server.wait_ready()
    assert time.monotonic() - t < 5
    assert "exit code 3" in e.value.message and "CUDA out of memory" in e.value.message
    server.stop()


def test_deadline(tmp_path: Path, port: int) -> None:
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", "import time; time.sleep(60)"],
                                          ready_timeout_s=0.5))
    with pytest.raises(ServerError, match="not ready"):
        server.wait_ready()
    assert server.stop().signal == "SIGTERM"


def test_missing_command(tmp_path: Path, port: int) -> None:
    with pytest.raises(ServerError, match="cannot start"):
        ProcessRuntime().start(_spec(tmp_path, port, ["/nonexistent/server"]))


def test_secrets_are_redacted_from_the_log(tmp_path: Path, port: int) -> None:
    cmd = [sys.executable, "-c", "import os; print('token is', os.environ['HF_TOKEN'], flush=True)"]
    server = ProcessRuntime().start(_spec(tmp_path, port, cmd, secret_env={"HF_TOKEN": "hf_supersecret123"}))
    with pytest.raises(ServerError):
        server.wait_ready()
    server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "token is ***" in log and "hf_supersecret123" not in log
    assert "hf_supersecret123" not in str(server.describe())


def test_check_alive_after_kill(tmp_path: Path, port: int) -> None:
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = ProcessRuntime().start(_spec(tmp_path, port, cmd))
    server.wait_ready()
    server.check_alive()
    os.kill(server.proc.pid, 9)
    time.sleep(0.3)
    with pytest.raises(ServerError, match="exit code -9"):
        server.check_alive()
    server.stop()


def test_server_cpus_pin_the_server_and_what_it_starts(tmp_path: Path, port: int) -> None:
    from kit.plumbing.affinity import available_cpus, process_cpus

    last = max(available_cpus())
    # the server starts a thread-heavy child before it listens: both must be pinned from their first instruction
    script = (
        "import os, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        f"os.execvp(sys.executable, [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n"
    )
    before = os.sched_getaffinity(0)
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", script], cpus=str(last)))
    try:
        assert os.sched_getaffinity(0) == before  # kit's own thread is back where it was
        server.wait_ready()
        child = int((tmp_path / "child.pid").read_text())
        assert process_cpus(server.proc.pid) == process_cpus(child) == str(last)
        d = server.describe()
        assert d["cpus"] == str(last) and d["cpus_allowed"] == str(last)
    finally:
        server.stop()


def test_unpinned_server_records_where_it_may_run(tmp_path: Path, port: int) -> None:
    from kit.plumbing.affinity import available_cpus, format_cpulist

    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = ProcessRuntime().start(_spec(tmp_path, port, cmd))
    try:
        d = server.describe()
        assert d["cpus"] is None and d["cpus_allowed"] == format_cpulist(available_cpus())
    finally:
        server.stop()
