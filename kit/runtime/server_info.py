"""The engine's account of itself, read once per cell after readiness (``server.info_path``; sglang's
``/server_info``: resolved arguments, ``max_total_num_tokens``, version, and from the kit OEA patch its marker).

One bounded GET (MAX_BYTES, TIMEOUT_S), never through a proxy. A server that cannot be asked, answers non-200,
too much or not a JSON object gives a file that says so (``error``): the cell goes on, and the file records what
was missing. Text values of keys that name secrets (api_key, hf_token, ...) and any secret of the server's
environment are replaced by ***.
"""

from __future__ import annotations

import http.client
import ssl

from kit.files.server_info import ServerInfoFile
from kit.plumbing.clock import utc_now
from kit.plumbing.jsontypes import MAX_DEPTH, Json, JsonObject, TooDeep, loads, nesting
from kit.plumbing.net import request
from kit.plumbing.secretnames import secret_name
from kit.runtime import ServerSpec

MAX_BYTES = 8 * 1024 * 1024  # sglang 0.5.23's /server_info is ~30-60 KB
TIMEOUT_S = 30.0
PATCH_KEY = "kit_oea_patch"


def _get(url: str, context: ssl.SSLContext | None) -> tuple[int | None, bytes, str | None]:
    try:
        status, body = request(url, timeout=TIMEOUT_S, max_bytes=MAX_BYTES, context=context)
    except (OSError, ValueError, http.client.HTTPException) as e:
        return None, b"", f"cannot be asked: {e}"
    return status, body if status == 200 else b"", None if status == 200 else f"HTTP {status}"


def _text(v: Json) -> bool:
    """A value that can hold a secret's text: a non-empty string, or a list holding one (counts are numbers)."""
    return (isinstance(v, str) and bool(v)) or (isinstance(v, list) and any(isinstance(x, str) and x for x in v))


def redact(value: Json, spec: ServerSpec) -> Json:
    """A copy with the values of secret-named keys and every secret of the server's environment replaced."""
    if isinstance(value, dict):
        # a key naming a secret as a word of its own (api_key, apiKey, hf-token), whose value is text
        return {k: "***" if secret_name(k, plural=True) and _text(v) else redact(v, spec)
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, spec) for v in value]
    if isinstance(value, str):
        return spec.redact(value)
    return value


def _int(doc: JsonObject, key: str) -> int | None:
    value = doc.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    states = doc.get("internal_states")  # sglang: one per DP rank, the scheduler's own figures
    if isinstance(states, list) and states and isinstance(states[0], dict):
        inner = states[0].get(key)
        if isinstance(inner, int) and not isinstance(inner, bool):
            return inner
    return None


def read_server_info(spec: ServerSpec, path: str) -> ServerInfoFile:
    """``path`` of the ready server, as a bundle file."""
    fetched_at = utc_now()
    status, body, error = _get(spec.base_url + path, spec.ssl_context)
    if error is None and status != 200:
        error = f"HTTP {status}"
    if error is None and len(body) > MAX_BYTES:
        error = f"the answer is larger than {MAX_BYTES} bytes; kept none of it"
    doc: Json = None
    if error is None:
        try:
            doc = loads(body)
        except TooDeep:
            error = f"nested deeper than {MAX_DEPTH} levels; kept none of it"
        except (ValueError, UnicodeDecodeError) as e:
            error = f"not JSON: {e}"
    if error is None and nesting(doc) > MAX_DEPTH:
        error = f"nested deeper than {MAX_DEPTH} levels; kept none of it"
    if error is None and not isinstance(doc, dict):
        error = f"not a JSON object (a {type(doc).__name__})"
    if error is not None or not isinstance(doc, dict):
        return ServerInfoFile(path=path, fetched_at=fetched_at, status=status, size_bytes=len(body), error=error)
    clean = redact(doc, spec)
    assert isinstance(clean, dict)
    version, patch = clean.get("version"), clean.get(PATCH_KEY)
    return ServerInfoFile(
        path=path, fetched_at=fetched_at, status=status, size_bytes=len(body),
        version=version if isinstance(version, str) else None,
        max_total_num_tokens=_int(clean, "max_total_num_tokens"),
        max_running_requests=_int(clean, "max_running_requests"),
        patch=patch if isinstance(patch, dict) else None, info=clean)
