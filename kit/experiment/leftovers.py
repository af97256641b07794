"""What a kit that died (SIGKILL, the OOM killer, power loss of its own process) left running, stopped by the
resume of its bundle before the gates run: the same run id, and the bundle's lock held by this process, prove
that no live kit owns them. Servers of any other run are never touched (the leftover gate names them).

Process runtime: the records of ``kit.runtime.records`` whose run id is this bundle's and whose group is still
the recorded one (a reused PGID is never signalled). Docker runtime: the containers labelled with this run id.
The load drivers need nothing: they leave on their own when their parent goes.
"""

from __future__ import annotations

from kit.cleanup import clean
from kit.errors import KitError
from kit.plumbing.procs import stop_group
from kit.runtime.records import read_record, record_files, recorded_members

GRACE_S = 5.0


def stop_own_leftovers(run_id: str, runtime: str) -> list[str]:
    """Stop this run's servers that outlived the kit that started them; returns what was stopped."""
    stopped: list[str] = []
    for path in record_files():
        record = read_record(path)
        if record is None or record.get("run_id") != run_id:
            continue
        members, _foreign = recorded_members(record)
        if members:
            left = stop_group(int(record["pgid"]), GRACE_S).left
            if left:
                continue  # still there: the leftover gate names it and fails
            stopped.append(f"process group {record['pgid']} (cell {record.get('cell')}): "
                           + " ".join(record.get("command", []))[:120])
        path.unlink(missing_ok=True)
    if runtime == "docker":
        try:
            stopped += [f"container {c}" for c in clean(run_id=run_id)["containers"]]
        except KitError:
            pass  # Docker not reachable: the leftover gate says so
    return stopped
