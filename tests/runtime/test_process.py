from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.ports import free_port

from kit.errors import ServerError
from kit.plumbing.net import port_bindable
from kit.plumbing.poll import poll_until
from kit.plumbing.procs import group_members
from kit.runtime import ServerSpec
from kit.runtime.process import ProcessRuntime, ProcessServer


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


@pytest.fixture
def no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host where kit makes no cgroup (KIT_CGROUP=0 stands in for a read-only or cgroup v1 one): what left the
    group is found by parent links, the output pipe and the environment's tag alone."""
    monkeypatch.setenv("KIT_CGROUP", "0")


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
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
        f"open({str(tmp_path / 'child.pid')!r}, 'w').write(str(child.pid))\n"
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


# --------------------------------------------------------------------------- readiness fails fast (issue 21)


def _http_server(port: int, bind: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", bind]


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_server_on_another_port_fails_fast_naming_where_it_listens(tmp_path: Path, port: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A real http.server told the wrong port: not the 120 s deadline but the grace (2 s here, 10 s in kit: the
    unit tier does not wait it out), and the fix."""
    from kit.errors import ExitCode
    from kit.runtime import process

    monkeypatch.setattr(process, "ELSEWHERE_GRACE_S", 2.0)
    other = free_port()
    server = ProcessRuntime().start(_spec(tmp_path, port, _http_server(other), ready_timeout_s=120))
    t = time.monotonic()
    try:
        with pytest.raises(ServerError) as e:
            server.wait_ready()
        waited = time.monotonic() - t
    finally:
        server.stop()
    first = e.value.message.splitlines()[0]
    print(f"failed after {waited:.1f} s (grace {process.ELSEWHERE_GRACE_S:g} s)")
    assert waited < process.ELSEWHERE_GRACE_S + 20  # liveness: far below the 120 s deadline
    assert e.value.exit_code == ExitCode.SERVER_FAILED == 7
    assert f"listens on 127.0.0.1:{other}, not on 127.0.0.1:{port}" in first
    assert f"Serving HTTP on 127.0.0.1 port {other}" in first  # the log line that says where, in the summary line
    assert f"set server.port to {other}" in (e.value.hint or "") and "--port {port}" in (e.value.hint or "")


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_server_on_the_right_port_but_another_address_fails_fast(tmp_path: Path, port: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.runtime import process

    monkeypatch.setattr(process, "ELSEWHERE_GRACE_S", 1.0)
    server = ProcessRuntime().start(_spec(tmp_path, port, _http_server(port, "127.0.0.2"), ready_timeout_s=60))
    try:
        with pytest.raises(ServerError, match=rf"listens on 127\.0\.0\.2:{port}, not on 127\.0\.0\.1:{port}"):
            server.wait_ready()
    finally:
        server.stop()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_a_metrics_port_first_does_not_fail_a_slow_server(tmp_path: Path, port: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP port the server announces and serves for less than the grace before its API port (metrics) is not
    taken for the wrong port."""
    from kit.runtime import process

    monkeypatch.setattr(process, "ELSEWHERE_GRACE_S", 3.0)
    metrics = free_port()
    script = (
        "import os, subprocess, sys, time\n"
        f"m = subprocess.Popen([sys.executable, '-m', 'http.server', '{metrics}', '--bind', '127.0.0.1'])\n"
        "time.sleep(1.5)\n"
        f"os.execvp(sys.executable, [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n"
    )
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", script], ready_timeout_s=60))
    try:
        assert server.wait_ready() < 60
    finally:
        server.stop()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_a_listener_the_log_does_not_announce_is_never_asked(tmp_path: Path, port: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A rendezvous socket (a TCPStore, gloo) listening for longer than the grace while the server loads: kit sends
    it nothing (a GET could upset it) and waits for the API port."""
    from kit.runtime import process

    monkeypatch.setattr(process, "ELSEWHERE_GRACE_S", 1.0)
    store = free_port()
    touched = tmp_path / "touched"
    script = (
        "import socket, subprocess, sys, threading, time\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {store})); s.listen(16)\n"
        f"threading.Thread(target=lambda: (s.accept(), open({str(touched)!r}, 'w').close()), daemon=True).start()\n"
        "print('loading weights (http://huggingface.co mirror)', flush=True)\n"
        "time.sleep(4)\n"
        f"subprocess.run([sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n"
    )
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", script], ready_timeout_s=60))
    try:
        assert server.wait_ready() >= 4
    finally:
        server.stop()
    assert not touched.exists()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_timeout_says_where_the_group_listens_and_quotes_the_log(tmp_path: Path, port: int) -> None:
    store = free_port()
    code = ("import socket, time\n"
            f"s = socket.socket(); s.bind(('127.0.0.1', {store})); s.listen(1)\n"
            "print('loading shard 3 of 8', flush=True); time.sleep(60)\n")
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", code], ready_timeout_s=2))
    try:
        with pytest.raises(ServerError) as e:
            server.wait_ready()
    finally:
        server.stop()
    first = e.value.message.splitlines()[0]
    assert f"its processes listen on 127.0.0.1:{store}" in first and "(log: loading shard 3 of 8)" in first


def test_exit_names_the_last_log_line_in_the_first_line(tmp_path: Path, port: int) -> None:
    cmd = [sys.executable, "-c", "import sys; print('loading'); sys.exit('ValueError: bad --tp 3')"]
    server = ProcessRuntime().start(_spec(tmp_path, port, cmd))
    with pytest.raises(ServerError) as e:
        server.wait_ready()
    server.stop()
    assert e.value.message.splitlines()[0].endswith("with exit code 1 (log: ValueError: bad --tp 3)")


def test_tail_lines_are_the_lines_a_terminal_shows(tmp_path: Path) -> None:
    from kit.runtime import TAIL_BYTES, TAIL_LINE_CHARS, log_note, tail_lines

    log = tmp_path / "server.log"
    bars = "".join(f"\rLoading weights: {i}%" for i in range(0, 101, 5))
    log.write_bytes(b"x" * (2 * TAIL_BYTES) + b"\nstarting\n" + bars.encode() + b"\nwindows line\r\n"
                    + b"y" * (3 * TAIL_LINE_CHARS) + b"\nlast words")
    lines = tail_lines(log, 30)
    assert lines[0] == "starting"  # the line the 64 KiB window cut is dropped, the x's never shown
    assert lines[1] == "Loading weights: 100%"  # one progress bar is one line, as the terminal left it
    assert lines[2] == "windows line"
    assert lines[3] == "y" * TAIL_LINE_CHARS + " [...]"
    assert lines[4] == "last words" and len(lines) == 5
    assert log_note(lines) == " (log: last words)"
    assert log_note(["", "  "]) == " (the log is empty)"
    assert tail_lines(tmp_path / "missing.log") == []


def _with_daemon(tmp_path: Path, port: int, script: str, pidfile: Path) -> tuple[ProcessServer, int]:
    """A ready server from ``script``, and the PID its daemon wrote to ``pidfile`` (waited for, 10 s at most)."""
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", script]))
    server.wait_ready()
    assert poll_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, interval=0.05)
    return server, int(pidfile.read_text())


def _gone(pid: int) -> bool:
    """Whether ``pid`` is dead or a zombie."""
    try:
        return "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True


def _stopped_and_named(server: ProcessServer, daemon: int, command: str) -> None:
    """The server's stop names the daemon (PID and the start of its command line) and leaves it dead or a zombie."""
    info = server.stop()
    escaped = info.details.get("escaped_group")
    assert escaped and escaped[0].startswith(f"PID {daemon}: {command}"), info.details
    assert _gone(daemon)


@pytest.mark.slow
def test_a_process_that_left_the_group_holding_the_output_is_found_and_stopped(tmp_path: Path, port: int) -> None:
    """A review's server daemonized (setsid, a double fork): the stop said the group was gone (group_members_left
    []), yet four processes lived on, each stop waited 5 s on the log pipe they held, and nothing said so."""
    pidfile = tmp_path / "daemon.pid"
    script = (
        "import os, subprocess, sys\n"
        f"subprocess.Popen(['setsid', 'sh', '-c', 'echo $$ > {pidfile}; exec sleep 600'])\n"
        f"os.execvp(sys.executable, [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n"
    )
    server, daemon = _with_daemon(tmp_path, port, script, pidfile)
    assert os.getpgid(daemon) != server.pgid  # it left the group: stop_group alone never reaches it
    _stopped_and_named(server, daemon, "sleep 600")


@pytest.mark.slow
def test_a_daemon_that_closed_its_output_is_found_by_its_environment_and_stopped(tmp_path: Path, port: int,
                                                                                 no_cgroup: None) -> None:
    """A review's server double-forked, setsid and pointed its stdio at /dev/null: nothing held the output pipe, so
    the stop found nothing, the run ended complete, and the daemon lived on through later cells (the gates, kit
    gates and kit clean saw nothing). It keeps the environment it inherited: the server's own tag finds it."""
    pidfile = tmp_path / "daemon.pid"
    daemon_code = (f"open({str(pidfile)!r}, 'w').write(str(os.getpid())); "
                   "fd = os.open(os.devnull, os.O_RDWR); [os.dup2(fd, i) for i in (0, 1, 2)]; time.sleep(600)")
    script = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        {daemon_code}\n"
        "    os._exit(0)\n"
        f"os.execvp(sys.executable, [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n"
    )
    server, daemon = _with_daemon(tmp_path, port, script, pidfile)
    assert os.getpgid(daemon) != server.pgid and f"pipe:[{server.pipe_inode}]" not in {
        os.readlink(f) for f in Path(f"/proc/{daemon}/fd").iterdir()}  # neither the group nor the pipe finds it
    _stopped_and_named(server, daemon, "")


@pytest.mark.slow
def test_a_daemon_that_keeps_forking_away_is_hunted_down(tmp_path: Path, port: int, no_cgroup: None) -> None:
    """An outside review (2026-12-07), no cgroup: a daemon that forks again every 20 ms, each parent exiting at once,
    outran the stop's one scan for its tag (the PIDs it signalled were gone, their children alive); the run said
    clean and the daemon lived on. The stop scans again, freezing each on sight, until a scan finds none."""
    from kit.plumbing.procs import tagged

    alive = tmp_path / "alive"
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", _hopper_script(port, alive)],
                                          stop_grace_s=1))
    try:
        server.wait_ready()
        assert poll_until(lambda: alive.exists() and alive.stat().st_size > 50, 10)
        info = server.stop()
        assert tagged(server.tag) == [], info.details
        size = alive.stat().st_size
        time.sleep(0.5)  # 25 of its hops
        assert alive.stat().st_size == size, "it still writes"
        assert info.details["escaped_group"], info.details
    finally:
        for pid in tagged(server.tag):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_dead_kit_s_forking_daemon_is_found_by_the_tag_its_record_keeps(tmp_path: Path, port: int,
                                                                         no_cgroup: None) -> None:
    """kit SIGKILLed and its server's leader gone, no cgroup: the daemon that keeps forking away is found by the tag
    the server's record now keeps, blocks the gate, and kit clean ends it."""
    from kit.gates.leftovers import check_process_groups
    from kit.plumbing.procs import tagged
    from kit.runtime.leftovers import kill_leftover_groups

    alive = tmp_path / "alive"
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", _hopper_script(port, alive)]))
    try:
        server.wait_ready()
        assert poll_until(lambda: alive.exists() and alive.stat().st_size > 50, 10)
        os.kill(server.proc.pid, 9)
        server.proc.wait(timeout=10)
        assert not check_process_groups(run_id="next-run", phase="before").ok
        out = kill_leftover_groups(grace_s=1, run_id="test")
        assert len(out.stopped) == 1 and not out.survived, out
        assert tagged(server.tag) == []
        size = alive.stat().st_size
        time.sleep(0.5)
        assert alive.stat().st_size == size, "it still writes"
        assert check_process_groups(run_id="next-run", phase="before").ok
    finally:
        for pid in tagged(server.tag):
            os.kill(pid, signal.SIGKILL)
        server.pump.join(timeout=5)


def _hopper_script(port: int, alive: Path) -> str:
    """A server whose daemon forks again every 20 ms, each parent exiting at once (SIGTERM ignored), appending its
    PID to ``alive``; the server itself serves HTTP on ``port``."""
    hopper = ("import os, signal, time\n"
              "os.setsid()\n"
              "fd = os.open(os.devnull, os.O_RDWR); [os.dup2(fd, i) for i in (0, 1, 2)]\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "while True:\n"
              "    if os.fork() != 0:\n"
              "        os._exit(0)\n"
              f"    open({str(alive)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
              "    time.sleep(0.02)\n")
    return ("import os, sys\n"
            "if os.fork() == 0:\n"
            f"    exec({hopper!r})\n"
            f"os.execvp(sys.executable, [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n")


def _scrubbed_daemon_script(port: int, pidfile: Path, first: str = "") -> str:
    """A server that leaves a daemon behind every trace but its parent links: a double fork, setsid, its stdio on
    /dev/null and an exec with an empty environment (no tag), then serves HTTP on ``port``. The daemon runs
    ``first`` (lines of Python) before it writes its PID to ``pidfile``."""
    daemon = f"import os, time\n{first}open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    return (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        fd = os.open(os.devnull, os.O_RDWR)\n"
        "        [os.dup2(fd, i) for i in (0, 1, 2)]\n"
        f"        os.execve(sys.executable, [sys.executable, '-c', {daemon!r}], {{}})\n"
        "    os._exit(0)\n"
        f"os.execvp(sys.executable, [sys.executable, '-m', 'http.server', '{port}', '--bind', '127.0.0.1'])\n"
    )


def _traceless(server: ProcessServer, daemon: int) -> None:
    """``daemon`` left the group, holds no end of the output pipe and has no tag: only its parent is the leader's."""
    from kit.plumbing.procs import TAG_VAR

    assert os.getpgid(daemon) != server.pgid
    assert f"pipe:[{server.pipe_inode}]" not in {os.readlink(f) for f in Path(f"/proc/{daemon}/fd").iterdir()}
    assert TAG_VAR.encode() not in Path(f"/proc/{daemon}/environ").read_bytes()
    ppid = int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert ppid == server.proc.pid  # reparented to the leader (its subreaper), not to init


@pytest.mark.slow
def test_a_daemon_that_also_scrubbed_its_environment_is_found_by_its_parent_links(tmp_path: Path, port: int,
                                                                                  no_cgroup: None) -> None:
    """A review's server double-forked, setsid, closed its output and scrubbed its environment: neither the group,
    the pipe nor the tag found it, and it outlived the run. The leader is now its subreaper: the stop finds it."""
    pidfile = tmp_path / "daemon.pid"
    server, daemon = _with_daemon(tmp_path, port, _scrubbed_daemon_script(port, pidfile), pidfile)
    _traceless(server, daemon)
    _stopped_and_named(server, daemon, sys.executable)


@pytest.mark.slow
def test_a_leftover_s_scrubbed_daemon_goes_with_it(tmp_path: Path, port: int, no_cgroup: None) -> None:
    """kit killed mid-cell (no stop ran): `kit clean` / a resume stop the leftover group and, by the leader's parent
    links taken before it goes, the daemon that left the group without a trace."""
    from kit.runtime.leftovers import kill_leftover_groups

    pidfile = tmp_path / "daemon.pid"
    server, daemon = _with_daemon(tmp_path, port, _scrubbed_daemon_script(port, pidfile), pidfile)
    _traceless(server, daemon)
    out = kill_leftover_groups(grace_s=2, run_id="test")  # as if its kit were gone
    assert len(out.stopped) == 1 and f"left its group: PIDs [{daemon}]" in out.stopped[0], out
    assert not out.survived
    server.proc.wait(timeout=10)
    assert poll_until(lambda: _gone(daemon), 10, interval=0.05)
    server.pump.join(timeout=5)


@pytest.mark.slow
def test_a_daemon_that_escapes_in_the_sigterm_handler_is_caught_while_the_leader_lives(tmp_path: Path, port: int,
                                                                                       no_cgroup: None) -> None:
    """A review: the stop took what left the group once, before SIGTERM; a server whose SIGTERM handler
    double-forks, calls setsid, closes the daemon's output and scrubs its environment, then exits, left it
    running. The stop now looks again (every 0.2 s) while the leader lives."""
    pidfile = tmp_path / "daemon.pid"
    daemon = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    script = (
        "import os, signal, sys, time\n"
        "def on_term(*_):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            fd = os.open(os.devnull, os.O_RDWR); [os.dup2(fd, i) for i in (0, 1, 2)]\n"
        f"            os.execve(sys.executable, [sys.executable, '-c', {daemon!r}], {{}})\n"
        "        os._exit(0)\n"
        "    os.wait(); time.sleep(1.5); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "import http.server\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()\n"
    )
    server = ProcessRuntime().start(_spec(tmp_path, port, [sys.executable, "-c", script], stop_grace_s=5))
    server.wait_ready()
    info = server.stop()
    escaped = [e for e in info.details.get("escaped_group") or [] if "time.sleep(600)" in e]  # its command line
    assert len(escaped) == 1, info.details
    daemon_pid = int(escaped[0].split(":")[0].removeprefix("PID "))
    assert not pidfile.exists() or int(pidfile.read_text()) == daemon_pid
    assert _gone(daemon_pid)


@pytest.mark.parametrize(("command", "why"), [
    (["no-such-server-anywhere"], "No such file or directory"),
    (["{tmp}/serve.sh"], "Permission denied"),  # a file, not executable
    (["{tmp}"], "Permission denied"),  # a directory
    (["./serve.sh"], "No such file or directory"),  # relative: from kit's directory, which has no serve.sh
    (["{tmp}/garbage"], "Exec format error"),  # executable, no shebang, not a binary
    (["{tmp}/orphan.sh"], "No such file or directory"),  # its shebang's interpreter is missing
])
def test_a_command_that_cannot_run_is_named_at_once(tmp_path: Path, port: int, command: list[str],
                                                   why: str) -> None:  # fmt: skip
    """The exec's own errno, back from the shim on a close-on-exec pipe (as subprocess does for a bare command),
    the same words Popen of the command would raise (checked against it), nothing left behind."""
    (tmp_path / "serve.sh").write_text("#!/bin/sh\nexec sleep 60\n")  # mode 644
    (tmp_path / "garbage").write_bytes(b"\x00\x01 not a program")
    (tmp_path / "orphan.sh").write_text("#!/no/such/interpreter\n")
    for name in ("garbage", "orphan.sh"):
        (tmp_path / name).chmod(0o755)
    (tmp_path / "empty").mkdir()
    command = [command[0].format(tmp=tmp_path)]
    with pytest.raises(OSError) as direct:
        subprocess.Popen(command, cwd=tmp_path / "empty" if command[0].startswith("./") else None)
    assert direct.value.strerror == why
    with pytest.raises(ServerError) as e:
        ProcessRuntime().start(_spec(tmp_path, port, command))
    assert e.value.message == f"cannot start server for a: {command[0]}: {why}"
    assert "server.command" in (e.value.hint or "")
    assert not list((tmp_path / "state").rglob("*.json"))  # no record of a server that never ran


def test_the_server_gets_the_environment_and_signals_a_bare_popen_gives(tmp_path: Path, port: int) -> None:
    """The shim between kit and the command changes nothing the command can see: its environment is exactly kit's
    (no LC_CTYPE from Python's locale coercion, whatever the locale), its ignored signals are a bare Popen's
    (Python's start ignores SIGPIPE and SIGXFSZ, which an exec would keep), and a loader variable meant for the
    server (here a broken libffi first on LD_LIBRARY_PATH) never reaches the shim's own Python."""
    from kit.runtime import server_environment

    broken = tmp_path / "lib"
    broken.mkdir()
    (broken / "libffi.so.8").write_bytes(b"")  # the shim's ctypes would fail to load it
    probe = "grep SigIgn /proc/self/status; env -0"
    spec = _spec(tmp_path, port, ["sh", "-c", probe], env={"LANG": "C", "LD_LIBRARY_PATH": str(broken)})
    server = ProcessRuntime().start(spec)
    assert server.proc.wait(timeout=20) == 0
    server.stop()
    out = spec.log_path.read_bytes()
    sig_line, _, env_blob = out.partition(b"\n")
    bare = subprocess.run(["sh", "-c", "grep SigIgn /proc/self/status"], capture_output=True, check=True)
    assert sig_line + b"\n" == bare.stdout  # the signals a bare Popen leaves ignored, no more
    got = dict(item.decode().split("=", 1) for item in env_blob.split(b"\0") if item)
    got.pop("KIT_SERVER_TAG")
    got.pop("PWD", None)  # the shell's own
    got.pop("SHLVL", None)
    assert got == {k: v for k, v in server_environment(spec).items() if k not in ("PWD", "SHLVL")}
    assert "LC_CTYPE" not in got and got["LD_LIBRARY_PATH"] == str(broken)


def test_the_leader_runs_the_command_itself_and_keeps_its_exit_code(tmp_path: Path, port: int) -> None:
    """The shim execs the command in the same process: the recorded PID's command line is the command's, and its
    exit code is the command's own."""
    server = ProcessRuntime().start(_spec(tmp_path, port, ["sh", "-c", "sleep 0.3; exit 7"]))
    assert server.proc.wait(timeout=10) == 7
    server.stop()
    from kit.runtime.records import cmdline, read_record

    server = ProcessRuntime().start(_spec(tmp_path, port, ["sleep", "30"]))
    try:
        record = read_record(server.record)
        assert record is not None and record["cmdline"] == cmdline(server.proc.pid) == ["sleep", "30"]
    finally:
        server.stop()


@pytest.mark.slow
def test_a_leftover_server_s_working_directory_goes_with_it(tmp_path: Path, port: int) -> None:
    """A kit killed mid-cell leaves its server and the empty directory it runs in (outside the bundle); the stop of
    leftovers (kit clean, a resume) removes both. Was: a kit-cwd-* directory in /tmp per killed cell."""
    from kit.runtime.leftovers import kill_leftover_groups

    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = ProcessRuntime().start(_spec(tmp_path, port, command))
    server.wait_ready()
    assert server.workdir.is_dir()
    if server.cgroup is not None:  # named after its cgroup, for a kit killed before recording it
        from kit.runtime.process import cgroup_workdir
        assert server.workdir == cgroup_workdir(server.cgroup)
    out = kill_leftover_groups(grace_s=2, run_id="test")  # as if its kit were gone
    assert len(out.stopped) == 1 and not server.workdir.exists()
    server.proc.wait(timeout=10)


def _cgroup_of(pid: int) -> str:
    return next(line[3:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if line.startswith("0::"))


def _cgroups_expected() -> bool:
    """Whether kit must be able to make cgroups here: root, KIT_CGROUP not off, a writable cgroup2 mount."""
    from kit.plumbing.cgroups import own_dir, wanted

    here = own_dir()
    return os.geteuid() == 0 and wanted() and here is not None and os.access(here, os.W_OK)


def _contained(server: ProcessServer) -> Path:
    """The server's cgroup: fails where kit must be able to make one (root, a writable cgroup2 mount: this
    machine's and CI's), skips elsewhere, saying why."""
    desc = server.describe()
    if desc["cgroup"] is None:
        server.stop()
        why = f"no cgroup for servers here: {desc['cgroup_note']}"
        if _cgroups_expected():
            pytest.fail(why)
        pytest.skip(why)
    return Path(desc["cgroup"])


@pytest.mark.slow
def test_a_server_runs_in_a_cgroup_of_its_own_that_goes_with_its_stop(tmp_path: Path, port: int) -> None:
    """The leader joins a new cgroup below kit's own before its command runs (so does everything it starts); the
    record names it for a later clean, the description shows it, and a proven stop removes it."""
    import json

    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = ProcessRuntime().start(_spec(tmp_path, port, command))
    server.wait_ready()
    path = _contained(server)
    assert path.name.startswith("kit-t-") and server.describe()["cgroup_note"] == ""
    assert (path / "cgroup.procs").read_text().split() == [str(server.proc.pid)]
    assert _cgroup_of(server.proc.pid) == _cgroup_of(os.getpid()).rstrip("/") + "/" + path.name  # below kit's own
    record = json.loads(next((tmp_path / "state/kit/servers").glob("*.json")).read_text())
    assert record["cgroup"] == str(path)
    server.stop()
    assert not path.exists()


@pytest.mark.slow
def test_a_daemon_whose_leader_exited_first_is_found_by_the_cgroup_and_stopped(tmp_path: Path, port: int) -> None:
    """The escape the subreaper cannot catch: the leader is gone before the stop, so the daemon is init's child,
    outside the group, holding neither the output pipe nor the tag. Without a cgroup the stop says nothing and it
    lives on (checked: with the server started uncontained this test fails); in the server's cgroup the stop names
    it and ends it."""
    pidfile = tmp_path / "daemon.pid"
    server, daemon = _with_daemon(tmp_path, port, _scrubbed_daemon_script(port, pidfile), pidfile)
    path = _contained(server)
    _traceless(server, daemon)
    os.kill(server.proc.pid, 9)
    server.proc.wait(timeout=10)
    assert poll_until(lambda: int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1]) != \
        server.proc.pid, 5, interval=0.02)  # reparented away from the dead leader
    _stopped_and_named(server, daemon, sys.executable)
    assert not path.exists()


@pytest.mark.slow
def test_a_dead_kit_s_orphaned_daemon_blocks_the_gate_until_kit_clean(tmp_path: Path, port: int) -> None:
    """kit SIGKILLed mid-cell and its server's leader gone too: its daemon, traceless but in the server's cgroup,
    is a leftover the gate names (PID and command line) and refuses on; the stop of leftovers (kit clean) ends it
    and removes the cgroup and the record; the gate then passes."""
    from kit.gates.leftovers import check_process_groups
    from kit.runtime.leftovers import kill_leftover_groups

    pidfile = tmp_path / "daemon.pid"
    server, daemon = _with_daemon(tmp_path, port, _scrubbed_daemon_script(port, pidfile), pidfile)
    path = _contained(server)
    os.kill(server.proc.pid, 9)
    server.proc.wait(timeout=10)
    gate = check_process_groups(run_id="next-run", phase="before")
    assert not gate.ok and f"pid {daemon}" in gate.message.lower(), gate.message
    out = kill_leftover_groups(grace_s=2, run_id="test")
    assert len(out.stopped) == 1 and f"left its group: PIDs [{daemon}]" in out.stopped[0], out
    assert poll_until(lambda: _gone(daemon), 10, interval=0.05)
    assert not path.exists() and check_process_groups(run_id="next-run", phase="before").ok
    server.pump.join(timeout=5)


def test_a_process_frozen_by_the_last_scan_is_killed_not_left_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh-eyes review: when the rescans' time ran out, what the last scan had frozen (SIGSTOP on sight) was
    returned as left, still stopped: holding its GPU memory and ports until someone killed it by hand."""
    from kit.runtime import subreaper

    proc = subprocess.Popen(["sleep", "60"])
    try:
        def scan() -> list[int]:
            os.kill(proc.pid, signal.SIGSTOP)  # as tagged(..., stop=True) freezes what it finds
            return [proc.pid] if proc.poll() is None else []

        monkeypatch.setattr(subreaper, "RESCAN_S", 0.0)
        left, found = subreaper.stop_rescanned(scan, [])
        assert proc.wait(timeout=10) == -signal.SIGKILL and found == [proc.pid] and left == []
    finally:
        proc.kill()
        proc.wait()


def test_a_relative_program_is_the_one_in_kits_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`command: ["./serve.sh"]` ran from the server's own empty working directory, where it never is: every cell
    failed "No such file or directory" (found 2026-12-07). It is taken from where kit runs, as model.path is."""
    from kit.runtime.subreaper import spawn

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "serve.sh").write_text("#!/bin/sh\npwd > \"$1\"\n")
    (tmp_path / "bin" / "serve.sh").chmod(0o755)
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "where"
    proc, _ = spawn(["./bin/serve.sh", str(out)], {"PATH": os.environ["PATH"]}, cwd=tmp_path / "empty")
    assert proc.wait(timeout=10) == 0
    assert out.read_text().strip() == str(tmp_path / "empty")  # found in kit's directory, run in its own


def test_a_shim_that_cannot_join_the_cgroup_still_runs_the_command_and_says_why() -> None:
    """spawn hands the shim an open cgroup.procs; a write that fails (here: a read-only descriptor) comes back as
    its errno, and the command runs all the same (kit then runs it without a cgroup, saying why)."""
    import errno

    from kit.runtime.subreaper import spawn

    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        proc, failed = spawn(["sh", "-c", "exit 7"], {"PATH": os.environ["PATH"]}, fd)
    finally:
        os.close(fd)
    assert failed == errno.EBADF and proc.wait(timeout=10) == 7


def test_a_record_never_names_a_cgroup_kit_did_not_make(tmp_path: Path) -> None:
    """A server record (a file in the user's state directory) leads kit to kill a cgroup: only one of kit's own
    names (kit-<server>-<16 hex>) under the cgroup2 mount, never its root, a parent, another name or a link."""
    from kit.plumbing.cgroups import Cgroup, mount_point

    mount = mount_point()
    if mount is None:
        pytest.skip("no cgroup v2 mount here")
    made, note = Cgroup.create("probe")
    if made is None:
        (pytest.fail if _cgroups_expected() else pytest.skip)(f"no cgroup for servers here: {note}")
    assert made is not None
    maker = (os.getpid(), made.maker[1])
    try:
        assert Cgroup.recorded(str(made.path), maker) == made
        assert Cgroup.recorded(str(made.path), (os.getpid() + 1, maker[1])) is None  # another kit's: never
        assert Cgroup.recorded(str(made.path), (os.getpid(), None)) is None
        assert Cgroup.recorded("/" + "x" * 5000, maker) is None and Cgroup.recorded("a\0b", maker) is None
        link = tmp_path / "kit-x-1.2-0123456789abcdef"
        link.symlink_to(made.path)
        for bad in (str(mount), str(made.path.parent), str(made.path) + "/..", str(link), 17, None,
                    str(made.path.with_name("docker")), str(made.path.with_name("kit-x-1.2-0123")),
                    str(made.path.with_name("kit-x-0123456789abcdef")),
                    str(mount / "kit-x-1.2-0123456789abcdef" / ".." / made.path.relative_to(mount))):
            assert Cgroup.recorded(bad, maker) is None, bad
    finally:
        assert made.remove() and not made.path.exists()


def test_kit_cgroup_0_makes_none_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.plumbing.cgroups import Cgroup

    monkeypatch.setenv("KIT_CGROUP", "off")
    assert Cgroup.create("x") == (None, "KIT_CGROUP=off")


@pytest.mark.slow
def test_kit_clean_stops_what_is_in_a_cgroup_no_record_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kit killed after making a server's cgroup and working directory and starting the server, before writing its
    record: kit clean finds the cgroup (one of kit's names, below its own cgroup, its kit gone, no record naming it),
    stops what is in it and removes it and the directory named after it; one a live kit made (this process: a kit
    starting a server right now) stays, its directory too."""
    from kit.plumbing.cgroups import Cgroup
    from kit.runtime import leftovers
    from kit.runtime.leftovers import kill_leftover_groups
    from kit.runtime.process import cgroup_workdir, make_workdir

    young, note = Cgroup.create("young")
    if young is None:
        (pytest.fail if _cgroups_expected() else pytest.skip)(f"no cgroup for servers here: {note}")
    assert young is not None
    young_dir = make_workdir("young", young)
    made_by_a_dead_kit = subprocess.run(
        [sys.executable, "-c", "from kit.plumbing.cgroups import Cgroup; from kit.runtime.process import make_workdir\n"
         "c = Cgroup.create('orphan')[0]; make_workdir('orphan', c); print(c.path)"],
        capture_output=True, text=True, check=True).stdout.strip()
    orphan = Cgroup(Path(made_by_a_dead_kit))
    orphan_dir = cgroup_workdir(orphan)
    assert young_dir == cgroup_workdir(young) and young_dir.is_dir() and orphan_dir.is_dir()
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    real = leftovers.made_here  # this host's other kit cgroups (a developer's dead kit's) are not this test's
    monkeypatch.setattr(leftovers, "made_here", lambda: [c for c in real() if c in (orphan, young)])
    try:
        (orphan.path / "cgroup.procs").write_text(str(sleeper.pid))
        out = kill_leftover_groups(grace_s=1)
        mine = [s for s in out.stopped if str(orphan.path) in s]
        assert len(mine) == 1 and f"PIDs [{sleeper.pid}] sleep 600" in mine[0], out
        assert sleeper.wait(timeout=10) == -15 and not orphan.path.exists()  # SIGTERM was enough
        assert not orphan_dir.exists() and young_dir.is_dir()
        assert young.path.is_dir() and not any(str(young.path) in s for s in out.stopped + out.stale)
    finally:
        sleeper.kill()
        orphan.kill()
        orphan.remove()
        young.remove()
        for d in (young_dir, orphan_dir):
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_kit_clean_leaves_alone_the_cgroup_of_a_kit_in_another_pid_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kit in another PID namespace that shares this cgroup (a container's, not given a cgroup namespace) made a
    server's cgroup: the pid and start time in its name mean nothing here, so `kit clean` cannot tell whether that
    kit lives, and leaves the cgroup and what runs in it alone (the last note's open limit). The same name made in
    this namespace, its kit gone, is swept."""
    from kit.plumbing.cgroups import Cgroup, own_dir
    from kit.plumbing.procs import pid_namespace_inode
    from kit.runtime import leftovers
    from kit.runtime.leftovers import kill_leftover_groups

    here, ns = own_dir(), pid_namespace_inode()
    if here is None or ns is None or not _cgroups_expected():
        (pytest.fail if _cgroups_expected() else pytest.skip)("no cgroup for servers here")
    assert here is not None and ns is not None
    foreign = Cgroup(here / f"kit-foreign-999999.12.{ns + 1}-{'0' * 16}")  # pid 999999 started at tick 12: none here
    local = Cgroup(here / f"kit-local-999999.12.{ns}-{'1' * 16}")
    assert (foreign.maker, foreign.maker_namespace, local.maker_namespace) == ((999999, 12), ns + 1, ns)
    foreign.path.mkdir()
    local.path.mkdir()
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    monkeypatch.setattr(leftovers, "made_here", lambda: [foreign, local])
    try:
        (foreign.path / "cgroup.procs").write_text(str(sleeper.pid))
        out = kill_leftover_groups(grace_s=1)
        assert sleeper.poll() is None and foreign.path.is_dir() and foreign.procs() == [sleeper.pid], out
        assert not any(str(foreign.path) in x for x in out.stopped + out.stale + out.survived)
        assert not local.path.exists() and any(str(local.path) in x for x in out.stale), out
    finally:
        sleeper.kill()
        sleeper.wait()
        foreign.kill()
        foreign.remove()
        local.remove()


@pytest.mark.slow
def test_a_daemon_in_a_cgroup_it_made_below_the_server_s_is_found_and_both_go(tmp_path: Path, port: int) -> None:
    """A review: a daemon that made a cgroup below the server's and moved into it was in none of the lists kit
    read (cgroup.procs is the cgroup's own), the stop named nothing, the directory stayed, and kit clean dropped the
    record as stale while the daemon ran on. Now the cgroups below are read and removed too."""
    from kit.plumbing.cgroups import mount_point

    pidfile = tmp_path / "daemon.pid"
    into_a_child_cgroup = ("own = open('/proc/self/cgroup').read().split('0::', 1)[1].split()[0]\n"
                           f"sub = {str(mount_point())!r} + own + '/sub'\n"
                           "os.mkdir(sub); open(sub + '/cgroup.procs', 'w').write('0')\n")
    script = _scrubbed_daemon_script(port, pidfile, into_a_child_cgroup)
    server, pid = _with_daemon(tmp_path, port, script, pidfile)
    path = _contained(server)
    assert _cgroup_of(pid) == _cgroup_of(server.proc.pid) + "/sub"
    os.kill(server.proc.pid, 9)
    server.proc.wait(timeout=10)
    _stopped_and_named(server, pid, sys.executable)
    assert not path.exists()


def test_a_bad_cgroup_in_a_record_is_never_used_and_never_a_traceback(tmp_path: Path) -> None:
    """A review: the gate built its message and hint from the record's cgroup as written: a number raised a
    TypeError, and a path with '; rm -rf ~' went into the hint. Only a checked cgroup (kit's name, this record's
    kit) is named; the group itself still blocks, by its PGID."""
    import json

    from kit.gates.leftovers import check_process_groups

    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        records = tmp_path / "state/kit/servers"
        records.mkdir(parents=True)
        ticks = int(Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        for bad in (5, ["a"], "/sys/fs/cgroup/unified/system.slice; rm -rf ~", "x" * 5000):
            (records / f"{sleeper.pid}.json").write_text(json.dumps({
                "pgid": sleeper.pid, "pid": sleeper.pid, "run_id": "old", "cell": "a-r1", "command": ["sleep"],
                "started": "2026-12-06T00:00:00Z", "boot_id": None, "start_ticks": ticks, "cmdline": None,
                "cgroup": bad}))
            gate = check_process_groups(run_id="new", phase="before")
            assert not gate.ok and f"process group {sleeper.pid}" in gate.message, (bad, gate.message)
            assert "cgroup" not in gate.message and "rm -rf" not in (gate.hint or ""), (bad, gate.hint)
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.slow
def test_a_server_that_cannot_join_its_cgroup_runs_without_one_saying_why(tmp_path: Path, port: int,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The shim's write to cgroup.procs fails (here: it is handed a read-only descriptor): the server runs all the
    same, outside any cgroup, the empty cgroup is removed, and server.json says why."""
    from kit.plumbing.cgroups import Cgroup

    made: list[Cgroup] = []
    real = Cgroup.create

    def create(server: str) -> tuple[Cgroup | None, str]:
        group, note = real(server)
        made.extend([group] if group else [])
        return group, note

    monkeypatch.setattr(Cgroup, "create", staticmethod(create))
    monkeypatch.setattr(Cgroup, "join_file", lambda self: os.open(os.devnull, os.O_RDONLY))
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = ProcessRuntime().start(_spec(tmp_path, port, command))
    try:
        server.wait_ready()
        desc = server.describe()
        if not made:
            (pytest.fail if _cgroups_expected() else pytest.skip)(f"no cgroup here: {desc['cgroup_note']}")
        assert desc["cgroup"] is None and desc["cgroup_note"] == f"cannot join {made[0].path}: Bad file descriptor"
        assert not made[0].path.exists()
        assert _cgroup_of(server.proc.pid) == _cgroup_of(os.getpid())
    finally:
        server.stop()


def test_no_working_directory_is_a_clear_error_and_leaves_no_cgroup(tmp_path: Path, port: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The temp directory cannot take the server's working directory (full, gone): a ServerError naming it, no
    server started, and the cgroup made for it removed."""
    import tempfile

    from kit.plumbing.cgroups import own_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    here = own_dir()
    before = set(os.listdir(here)) if here is not None and here.is_dir() else set()
    with pytest.raises(ServerError, match=r"cannot make a working directory for t in .*gone") as e:
        ProcessRuntime().start(_spec(tmp_path, port, ["sleep", "30"], name="t"))
    assert e.value.hint == "free space there, or point TMPDIR elsewhere"
    after = set(os.listdir(here)) if here is not None and here.is_dir() else set()
    assert not {n for n in after - before if n.startswith("kit-t-")}
