"""The patch's marker as the serving process sees it: ``PATCHED`` (JSON, written by apply.py next to the
``kit_oea`` package), added by the patched ``/server_info`` under ``kit_oea_patch`` so that kit records, per cell,
that the server it measured is the patched one and which files and kit_oea sources it carries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MARKER = Path(__file__).resolve().parents[1] / "PATCHED"
MAX_BYTES = 64 * 1024


def read_marker(path: Path = MARKER) -> dict[str, Any]:
    """The marker's JSON object, or ``{"error": ...}`` saying why there is none (never raises)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        return {"error": f"{path}: {e.strerror or e}"}
    if len(data) > MAX_BYTES:
        return {"error": f"{path}: larger than {MAX_BYTES} bytes"}
    try:
        doc = json.loads(data)
    except ValueError as e:
        return {"error": f"{path}: not JSON ({e})"}
    return doc if isinstance(doc, dict) else {"error": f"{path}: not a JSON object"}
