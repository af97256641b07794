"""The process runtime: a server command as a subprocess in its own process group.

Start: the command runs in a new session (so its process group is its own) with a minimal environment
(``server_environment``: PATH, HOME, LANG, LC_*, TMPDIR, TZ, USER, the manifest's env, pass_env, and
what the runtime sets; never kit's own variables), stdout and stderr go to the cell's log (secrets and
their encoded forms redacted), and a record of the group and its leader's identity (start time, command
line) is written to ``state_dir()`` so that a later run's leftover gate and `kit clean` can find it if
kit itself dies, and never mistake another process that reuses the PGID for it.
Ready: the readiness path answers 2xx. It fails fast when the leader exits, and when the group listens on another
address or port than the manifest's, its log announces it as HTTP and it answers HTTP there, while nothing of it
listens where kit connects (the wrong port: its listening sockets from /proc, the fix in the error).
Stop: SIGTERM to the whole group, a grace period, SIGKILL, then proof: no process of the
group remains and the port can be bound again.
Escapes: where kit may make one, the server runs in a cgroup of its own (``kit.plumbing.cgroups``), joined before
its command runs: whatever left the group (setsid, a double fork, its output closed, its environment scrubbed,
its leader gone first) is still in it, and the stop and `kit clean` name it, SIGTERM it, then kill the whole
cgroup at once. Everywhere, the leader is also made the subreaper of everything it starts
(``kit.runtime.subreaper``), so a process that left the group stays below it by parent links while the leader
lives; the stop finds such processes by those links (taken before the group is signalled), by the output pipe
they hold and by the tag in their environment, names them and stops them.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

from kit.errors import ServerError
from kit.plumbing.affinity import parse_cpulist, pinned, process_cpus
from kit.plumbing.cgroups import Cgroup
from kit.plumbing.clock import utc_now
from kit.plumbing.logpump import LogPump, pipe_chunks
from kit.plumbing.net import http_get, http_ok, listening, local_url, port_bindable, reaches
from kit.plumbing.poll import Deadline, poll_until
from kit.plumbing.procs import TAG_VAR, group_members, pipe_holders, signal_group, start_ticks, stop_group, tagged
from kit.runtime import (
    ProcessDescription,
    ProcessStopDetails,
    ServerSpec,
    StopInfo,
    base_environment,
    log_note,
    redact_env,
    server_environment,
    tail_lines,
)
from kit.runtime.records import ServerRecord, boot_id, cmdline, maker, write_record
from kit.runtime.subreaper import Adopted, spawn, stop_escapes, stop_rescanned

__all__ = ["ProcessRuntime", "ProcessServer", "port_bindable"]

READY_FIRST_S = 0.05  # readiness polls: 50 ms, then x1.2 up to 1 s (a start of 0.4-2 s is seen within 20 % of it)
READY_BACKOFF = 1.2
READY_MAX_S = 1.0
ELSEWHERE_GRACE_S = 10.0  # HTTP answered elsewhere this long (and nothing listens where kit connects): wrong port
ELSEWHERE_PROBES = 8  # at most this many of the group's other listeners asked for HTTP per poll
ANNOUNCE_LINES = 400  # the log lines (of its last 64 KiB) searched for where the server says it listens


Contained = tuple[Cgroup | None, str]  # a server's cgroup, or None and why it has none

WORKDIR_PREFIX = "kit-cwd-"  # a server's working directory: <tmp>/kit-cwd-<its cgroup's name> (make_workdir)


def _pipe_inode(proc: subprocess.Popen[bytes]) -> int:
    try:
        return os.fstat(proc.stdout.fileno()).st_ino if proc.stdout is not None else 0
    except (OSError, ValueError):  # already read to its end and closed
        return 0


class ProcessServer:
    def __init__(self, spec: ServerSpec, proc: subprocess.Popen[bytes], record: Path, pump: LogPump,
                 inherited: list[str], workdir: Path, tag: str, contained: Contained) -> None:
        self.spec = spec
        self.cgroup, self.cgroup_note = contained  # its cgroup (None: none could be made or joined, and why)
        self.tag = tag  # TAG_VAR's value in its environment: found in any process it started, at the stop
        self.workdir = workdir  # its working directory, outside the bundle; removed when it is stopped
        self.pipe_inode = _pipe_inode(proc)  # its output pipe (0: unknown), to find what still holds it at the stop
        self.inherited = inherited
        self.proc = proc
        self.pgid = proc.pid
        self.record = record
        self.pump = pump
        self.started = time.monotonic()
        self._stopped: StopInfo | None = None
        self.cpus_allowed = process_cpus(proc.pid)  # read while it surely lives: describe() may come after stop

    def _tail(self) -> str:
        return "\n".join(f"    {self.spec.redact(line)}" for line in tail_lines(self.spec.log_path, 30))

    def _last_line(self, mentioning: str = "") -> str:
        return log_note([self.spec.redact(line) for line in tail_lines(self.spec.log_path, 30)], mentioning)

    def _died(self, what: str) -> ServerError:
        code = self.proc.poll()
        self.pump.join(timeout=2)
        return ServerError(
            f"server for {self.spec.arm} ({self.spec.name}) {what} with exit code {code}{self._last_line()}\n"
            f"last log lines:\n{self._tail()}",
            hint=f"full log: {self.spec.log_path}",
        )

    @property
    def _connects_to(self) -> str:
        """The address kit connects to (a wildcard host through loopback, as ``base_url``)."""
        return "127.0.0.1" if self.spec.host in ("0.0.0.0", "::") else self.spec.host

    def _listening(self) -> list[tuple[str, int]]:
        return listening(group_members(self.pgid))

    def _elsewhere_now(self) -> list[tuple[str, int]]:
        """The group's listening sockets that its log announces as HTTP (a line naming http and the port), when none
        of its sockets takes kit's connections to the manifest's host and port (else none: a server that listens
        there is only slow). Only announced ports are ever asked: a GET could upset a rendezvous socket (a TCPStore,
        gloo) that a server opens while it loads."""
        socks = self._listening()
        if any(port == self.spec.port and reaches(addr, self._connects_to) for addr, port in socks):
            return []
        lines = [line.lower() for line in tail_lines(self.spec.log_path, ANNOUNCE_LINES)]
        return [(addr, port) for addr, port in socks
                if any("http" in line and re.search(rf"(?<![0-9]){port}(?![0-9])", line) for line in lines)]

    def _answers_http(self, socks: list[tuple[str, int]]) -> list[tuple[str, int]]:
        return [(addr, port) for addr, port in socks[:ELSEWHERE_PROBES]
                if http_get(local_url(addr, port, self.spec.readiness_path, self.spec.scheme), timeout=1.0,
                            context=self.spec.ssl_context) is not None]

    def _elsewhere(self, where: list[tuple[str, int]]) -> ServerError:
        shown = ", ".join(_address(a, p) for a, p in where)
        return ServerError(
            f"server for {self.spec.arm} ({self.spec.name}) listens on {shown}, not on "
            f"{_address(self.spec.host, self.spec.port)} where kit waits for it (its log says so; it has answered "
            f"HTTP there for {ELSEWHERE_GRACE_S:g} s){self._last_line(str(where[0][1]))}\n"
            f"last log lines:\n{self._tail()}",
            hint=f"make the server listen on the manifest's port: give it '{{port}}' (and '{{host}}') in "
                 f"server.command or the arm's args (e.g. --port {{port}}), or set server.port to {where[0][1]}; "
                 f"full log: {self.spec.log_path}",
        )

    def wait_ready(self) -> float:
        url = self.spec.base_url + self.spec.readiness_path
        # HTTP answers on another port: asked once when its listener appears and once more after the grace
        # (the server's own log is not filled with kit's probes); the listeners themselves are read every poll
        suspect: tuple[float, list[tuple[str, int]]] | None = None

        def ready() -> bool:
            nonlocal suspect
            if self.proc.poll() is not None:
                raise self._died("exited during start-up")
            if http_ok(url, context=self.spec.ssl_context):
                return True
            socks = self._elsewhere_now()
            if suspect is not None and not set(suspect[1]) <= set(socks):
                suspect = None
            if suspect is None:
                answering = self._answers_http(socks) if socks else []
                suspect = (time.monotonic(), answering) if answering else None
            elif time.monotonic() - suspect[0] >= ELSEWHERE_GRACE_S:
                answering = self._answers_http(suspect[1])
                if answering:
                    raise self._elsewhere(answering)
                suspect = None
            return False

        if poll_until(ready, Deadline(self.started + self.spec.ready_timeout_s), interval=READY_FIRST_S,
                      backoff=READY_BACKOFF, max_interval=READY_MAX_S):
            return time.monotonic() - self.started
        socks = self._listening()
        listens = (f"; its processes listen on {', '.join(_address(a, p) for a, p in socks)}" if socks
                   else "; none of its processes listens on a TCP port")
        raise ServerError(
            f"server for {self.spec.arm} not ready at {url} after {self.spec.ready_timeout_s:g} s{listens}"
            f"{self._last_line()}\nlast log lines:\n{self._tail()}",
            hint="raise server.ready_timeout_s if it is just slow, or check the log",
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise self._died("died")

    def stop(self) -> StopInfo:
        if self._stopped is not None:
            return self._stopped
        t0 = time.monotonic()
        adopted = Adopted(self.proc.pid, self.pgid, lambda: self.proc.poll() is None)
        ended = stop_group(self.pgid, self.spec.stop_grace_s, reap=adopted.watch)
        code = self.proc.wait(timeout=30)
        left = group_members(self.pgid)
        self.pump.join(timeout=1)
        escaped: list[str] = []
        if not left:  # the group is gone: what left it, by its cgroup, parent links, output pipe or environment's tag
            holders = pipe_holders(self.pipe_inode) if self.pump.is_alive() else []
            holders = sorted(set(holders) | set(tagged(self.tag)) | set(adopted.still_there()) | set(
                self.cgroup.procs() if self.cgroup else []))
            escaped = [f"PID {p}: {' '.join(cmdline(p) or ['?'])[:200]}" for p in holders]
            left = stop_escapes(holders, self.cgroup, self.spec.stop_grace_s)
            left, later = stop_rescanned(lambda: tagged(self.tag, stop=True), left)  # what forked away meanwhile
            escaped += [f"PID {p}: found by a later scan (it kept forking)" for p in later]
            if self.pump.is_alive():
                self.pump.finish(5.0, lambda: None, grace=0.0)  # the log is final from here, whatever holds the pipe
        port_free = port_bindable(self.spec.host, self.spec.port)
        if left:
            raise ServerError(
                f"process group {self.pgid} of {self.spec.name} still has processes {left} after SIGKILL"
                + (f" (left the group: {'; '.join(escaped)})" if escaped else ""),
                hint=f"kill -KILL {' '.join(map(str, left))}" if escaped else f"kill -KILL -- -{self.pgid}",
            )
        # what it wrote there is its own (caches, sockets, dumps); removed before its record, which names it for a
        # kit killed in between
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.cgroup is None or self.cgroup.remove():  # else its record stays: the gate and kit clean retry
            with contextlib.suppress(FileNotFoundError):
                self.record.unlink()
        details = ProcessStopDetails(pgid=self.pgid, port_free_after_stop=port_free, group_members_left=left,
                                     log_bytes=self.pump.bytes_written, log_dropped_bytes=self.pump.dropped_bytes,
                                     escaped_group=escaped)
        if self.pump.error is not None:
            details["log_error"] = self.pump.error
        self._stopped = StopInfo(exit_code=code, signal=ended.signal, stop_s=round(time.monotonic() - t0, 4),
                                 details=details)
        return self._stopped

    def describe(self) -> ProcessDescription:
        return ProcessDescription(
            runtime="process",
            pid=self.proc.pid,
            pgid=self.pgid,
            command=self.spec.command,
            env=redact_env(self.spec.env),
            secret_env_names=sorted(self.spec.secret_env),
            # the names it got from kit's environment: only the minimal base (PATH, HOME, LANG, ...)
            inherited_env_names=self.inherited,
            cwd=str(self.workdir),
            cpus=self.spec.cpus,
            cpus_allowed=self.cpus_allowed,
            cgroup=str(self.cgroup.path) if self.cgroup else None,
            cgroup_note=self.cgroup_note,
        )


class ProcessRuntime:
    name = "process"

    def start(self, spec: ServerSpec) -> ProcessServer:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        tag = secrets.token_hex(8)
        env = {**server_environment(spec), TAG_VAR: tag}
        inherited = sorted(set(base_environment()) - set(spec.env) - set(spec.secret_env))
        # an empty directory of its own, never the bundle: whatever a server leaves in its working directory (a
        # socket, a FIFO, a cache of gigabytes, a config dump with a token) must not become a file kit signs
        cgroup, note = Cgroup.create(spec.name)
        try:
            workdir = make_workdir(spec.name, cgroup)
        except OSError as e:
            if cgroup is not None:
                cgroup.remove()
            raise ServerError(f"cannot make a working directory for {spec.name} in {tempfile.gettempdir()}: "
                              f"{e.strerror or e}", hint="free space there, or point TMPDIR elsewhere") from None
        try:
            with pinned(parse_cpulist(spec.cpus) if spec.cpus else None):
                proc, note = self._popen(spec, env, workdir, cgroup, note)
        except OSError as e:
            shutil.rmtree(workdir, ignore_errors=True)
            if cgroup is not None:
                cgroup.remove()
            raise ServerError(
                f"cannot start server for {spec.arm}: {spec.command[0]}: {e.strerror or e}",
                hint="check server.command (or the arm's command) in the manifest, and server.cpus",
            ) from None
        if note and cgroup is not None:  # it could not join: the cgroup is empty, and of no use
            cgroup.remove()
            cgroup = None
        return self._supervise(spec, proc, inherited, workdir, tag, (cgroup, note))

    @staticmethod
    def _popen(spec: ServerSpec, env: dict[str, str], workdir: Path, cgroup: Cgroup | None,
               note: str) -> tuple[subprocess.Popen[bytes], str]:
        """The started server, and why it is not in a cgroup ("" when it is)."""
        join = None
        if cgroup is not None:
            try:
                join = cgroup.join_file()
            except OSError as e:
                note = f"cannot open {cgroup.path}/cgroup.procs: {e.strerror or e}"
        try:
            proc, failed = spawn(
                spec.command, env, join, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=workdir,  # empty: nothing planted in kit's cwd is on its path, nothing it writes in the bundle
                start_new_session=True)
        finally:
            if join is not None:
                os.close(join)
        if cgroup is not None and failed is not None:
            note = f"cannot join {cgroup.path}: {os.strerror(failed) if failed else 'refused'}"
        return proc, note

    @staticmethod
    def _supervise(spec: ServerSpec, proc: subprocess.Popen[bytes], inherited: list[str],
                   workdir: Path, tag: str, contained: Contained) -> ProcessServer:
        try:
            # the record first: a kit killed from here on leaves a server its resume and kit clean can find
            entry = ServerRecord(
                pgid=proc.pid, pid=proc.pid, run_id=spec.labels.get("kit.run"), cell=spec.labels.get("kit.cell"),
                command=spec.command, started=utc_now(), boot_id=boot_id(),
                start_ticks=start_ticks(proc.pid), cmdline=cmdline(proc.pid), workdir=str(workdir), tag=tag)
            maker(into=entry)
            if contained[0] is not None:
                entry["cgroup"] = str(contained[0].path)
            record = write_record(entry)
            stdout = proc.stdout
            assert stdout is not None
            pump = LogPump(partial(pipe_chunks, stdout), spec.log_path, name=f"log-{spec.name}",
                           limit=spec.log_limit_bytes)
            pump.start()
        except BaseException:
            # nothing may outlive a failed start, not even when the record cannot be written
            signal_group(proc.pid, signal.SIGKILL)
            if contained[0] is not None:
                contained[0].kill()
                contained[0].remove()
            proc.wait()
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return ProcessServer(spec, proc, record, pump, inherited, workdir, tag, contained)

    def describe(self) -> dict[str, str]:
        return {"runtime": "process"}


def cgroup_workdir(cgroup: Cgroup) -> Path:
    """The working directory of the server in ``cgroup``: ``<tmp>/kit-cwd-<the cgroup's name>``, so that a kit killed
    before it recorded the server leaves a directory found by its cgroup (leftovers: the unrecorded cgroups)."""
    return Path(tempfile.gettempdir()) / f"{WORKDIR_PREFIX}{cgroup.path.name}"


def make_workdir(name: str, cgroup: Cgroup | None) -> Path:
    """A new empty private directory for a server: named after its cgroup where it has one (its name is unique: 16
    random hex digits), else ``<tmp>/kit-cwd-<server name>-<random>``."""
    if cgroup is not None:
        path = cgroup_workdir(cgroup)
        with contextlib.suppress(OSError):  # taken (never by kit) or not makeable so: the random name below
            path.mkdir(mode=0o700)
            return path
    return Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{name}-"))


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
