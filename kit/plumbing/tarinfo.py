"""One normalised tar member header: root-owned, no user or group names, fixed mode and mtime, so that a
tar's bytes depend only on names and contents (bundle archives and image build contexts)."""

from __future__ import annotations

import tarfile


def normal_tarinfo(name: str, kind: bytes, mode: int, *, mtime: int = 0, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.pax_headers = {}
    return info
