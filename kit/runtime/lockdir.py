"""The host-wide reservation directory: where every user's kit keeps its port, GPU and run lock files, so that two
users (sudo, a container sharing the host's /run/lock, a Slurm job under another account, two HOMEs) reserve
against each other.

``KIT_LOCK_DIR`` when set, else ``/run/lock/kit`` where ``/run/lock`` is a directory (Debian, Ubuntu, Fedora: a
tmpfs of root's, mode 1777, emptied at boot, so no lock outlives the boot it was taken in), else
``/tmp/kit-locks``. The directory must be local to the host (locks on a shared file system would reserve one
node's ports on every node). Created on first use with mode 1777 (sticky, world-writable: every user creates
lock files, none can remove another's), whatever the umask.

Nothing here follows a symbolic link: the directory is ``lstat``-ed, lock files are opened with ``O_NOFOLLOW``
(and ``O_NONBLOCK``: a FIFO planted under a lock's name must not hang the open), and only a regular file with
one link is used. A directory that is a link, not a directory, or another user's without the sticky
world-writable mode is refused (exit 5) naming the path and the fix. Lock files are created 0o666 (port and GPU
locks are shared by every user over time) or 0o644 (a run's lock: only its kit writes who runs it); an existing
file is opened without ``O_CREAT`` first (``fs.protected_regular`` refuses ``O_CREAT`` on another user's file in
a sticky directory), read-write where allowed, else read-only (flock works on a read-only fd).

A lock file's content is informational only (who holds it, for the messages), read at most ``MAX_INFO`` bytes;
the flock is the truth. The owner of a file is the kernel's word (``st_uid``), never its content's.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from kit.errors import GateFailed

ENV = "KIT_LOCK_DIR"
RUN_LOCK_DIR = Path("/run/lock")
FALLBACK = Path("/tmp/kit-locks")
DIR_MODE = 0o1777
MAX_INFO = 16 * 1024  # bytes of a lock file's content read (a run's owner record is a few hundred)
MAX_ENTRIES = 4096  # lock files looked at when scanning the directory (a hostile user may create millions)
_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FIX = f"or set {ENV} to a directory of your own (runs using another directory do not see each other's reservations)"


def lock_dir(*, create: bool = True) -> Path:
    """The reservation directory, checked (and created when ``create``); GateFailed when it is unsafe."""
    path = _chosen()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return path
        _make(path)
        st = os.lstat(path)
    _check(path, st)
    return path


def _chosen() -> Path:
    if env := os.environ.get(ENV):
        return Path(env).absolute()
    try:
        if stat.S_ISDIR(os.lstat(RUN_LOCK_DIR).st_mode):
            return RUN_LOCK_DIR / "kit"
    except OSError:
        pass
    return FALLBACK


def _make(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)  # nobody else may use it before it has its mode
    except FileExistsError:
        return  # another kit made it meanwhile: checked by the caller
    except OSError as e:
        raise GateFailed(f"cannot create the kit lock directory {path}: {e.strerror}",
                         hint=f"create it as root (`mkdir -m 1777 {path}`), {FIX}") from None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, DIR_MODE)  # not mkdir's mode: the umask would narrow that
    finally:
        os.close(fd)


def _check(path: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise GateFailed(f"the kit lock directory {path} is a symbolic link (to {os.readlink(path)!r}); kit follows "
                         "no link there", hint=f"remove the link (its owner: {user_name(st.st_uid)}), {FIX}")
    if not stat.S_ISDIR(st.st_mode):
        raise GateFailed(f"the kit lock directory {path} is not a directory",
                         hint=f"remove it (its owner: {user_name(st.st_uid)}), {FIX}")
    shared = st.st_mode & 0o1002 == 0o1002  # sticky and world-writable: nobody removes another's lock
    if st.st_uid not in (0, os.geteuid()) and not shared:
        raise GateFailed(f"the kit lock directory {path} belongs to {user_name(st.st_uid)} and is not sticky and "
                         f"world-writable (mode {stat.S_IMODE(st.st_mode):04o}): that user could replace the locks "
                         "of every other", hint=f"have it made mode 1777 (`chmod 1777 {path}`) or removed, {FIX}")


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


@dataclass(frozen=True)
class LockFile:
    """An open lock file: its fd, whether it is writable, and its owner's uid (the kernel's word)."""

    fd: int
    writable: bool
    uid: int


def open_lock(path: Path, *, create: bool, mode: int = 0o666) -> LockFile | None:
    """``path`` opened for flock (created with ``mode`` when ``create``; None when it does not exist and
    ``create`` is False); GateFailed when it is a link, not a regular file, or cannot be opened at all."""
    for _ in range(8):  # a file created and removed by others between two tries: try again
        lock = _open_existing(path)
        if lock is not None or not create:
            return lock
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, mode)
        except FileExistsError:
            continue
        except OSError as e:
            raise _refused(path, e) from None
        os.fchmod(fd, mode)  # the umask narrowed os.open's mode
        return LockFile(fd, True, os.geteuid())
    raise GateFailed(f"the lock file {path} keeps appearing and disappearing", hint=f"try again, {FIX}")


def _open_existing(path: Path) -> LockFile | None:
    fd = None
    writable = True
    for flags in (os.O_RDWR, os.O_RDONLY):
        try:
            fd = os.open(path, flags | _OPEN)
            break
        except FileNotFoundError:
            return None
        except PermissionError as e:
            writable = False
            if flags == os.O_RDONLY:
                raise _refused(path, e) from None
        except OSError as e:
            raise _refused(path, e) from None
    assert fd is not None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} hard links"
        raise GateFailed(f"the lock file {path} is {what}; kit uses only a regular file of one link there",
                         hint=f"remove it (its owner: {user_name(st.st_uid)}), {FIX}")
    return LockFile(fd, writable, st.st_uid)


def _refused(path: Path, e: OSError) -> GateFailed:
    if e.errno == errno.ELOOP:
        return GateFailed(f"the lock file {path} is a symbolic link; kit follows no link there",
                          hint=f"remove the link, {FIX}")
    try:
        st = os.lstat(path)
        whose = f" (owner {user_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o})"
    except OSError:
        whose = ""
    return GateFailed(f"cannot open the lock file {path}{whose}: {e.strerror}",
                      hint=f"its owner or root can remove it (`kit clean` removes stale run locks), {FIX}")


def read_info(fd: int) -> str | None:
    """A lock file's content (at most ``MAX_INFO`` bytes, UTF-8), or None when longer, not text or unreadable."""
    try:
        raw = os.pread(fd, MAX_INFO + 1, 0)
    except OSError:
        return None
    if len(raw) > MAX_INFO:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def read_lock(path: Path) -> tuple[str | None, int] | None:
    """An existing lock file's content, as ``read_info`` gives it, and its owner's uid (None when the file is
    absent or refused)."""
    try:
        lock = open_lock(path, create=False)
    except GateFailed:
        return None
    if lock is None:
        return None
    try:
        return read_info(lock.fd), lock.uid
    finally:
        os.close(lock.fd)


def write_info(lock: LockFile, text: str) -> None:
    """Replace the content of a lock this process holds (nothing when it could only be opened read-only)."""
    if lock.writable:
        os.ftruncate(lock.fd, 0)
        os.pwrite(lock.fd, text.encode(), 0)


def entries(directory: Path, prefix: str) -> list[Path]:
    """Up to ``MAX_ENTRIES`` lock files in ``directory`` whose names start with ``prefix``, sorted."""
    out: list[Path] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.name.startswith(prefix) and entry.name.endswith(".lock"):
                    out.append(Path(entry.path))
                    if len(out) >= MAX_ENTRIES:
                        break
    except OSError:
        return []
    return sorted(out)
