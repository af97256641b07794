"""Secrets kit does not hold but can recognise by their name: a flag, a key or a variable that names a secret as a
word of its own (``--api-key``, ``apiKey``, ``hf-token``, ``HF_TOKEN=``, ``Authorization``), and a URL's password.

``kit.plumbing.redact`` masks every form of the secrets kit passes on; this masks what others put beside such a name:
the command line of a process that is not kit's (a gate names whatever holds a GPU or a port: another user's
server, whose ``--api-key`` must not reach a bundle) and secret-named keys of a server's JSON (``/server_info``).
Words are split at ``-``, ``_``, ``.`` and camelCase humps; ``max_total_tokens`` and ``tokenizer_path`` name counts
and paths, not secrets (the plural and a longer word are other words).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Sequence

from kit.plumbing.redact import MASK, redact

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "passphrase", "apikey", "credential",
                           "credentials", "authorization", "cookie"})
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "key"),
                           ("client", "secret"), ("api", "keys")})
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s@]+@")
_QUERY = re.compile(r"([?&;])([^=&#;\s]+)=[^&#;\s]*")
_HEADER = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
MAX_NESTED = 64 << 10  # a word holding a command line (sh -c "..."): masked as one when no longer than this
MAX_DEPTH = 4


def secret_name(name: str, *, plural: bool = False) -> bool:
    """Whether ``name`` names a secret as a word of its own (see the module doc); ``plural``: its plural too (a JSON
    key whose text value is secrets, ``hf_tokens``, where a flag ``--max-tokens`` takes a count)."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if plural:
        words = [w[:-1] if w.endswith("s") and w[:-1] in _SECRET_WORDS | {"key"} else w for w in words]
    return any(w in _SECRET_WORDS for w in words) or any(p in _SECRET_PAIRS for p in itertools.pairwise(words))


def mask_argv(args: Sequence[str], *, depth: int = 0) -> str:
    """A process's command line as one string, with the value of every secret-named option (``--api-key X``,
    ``--api-key=X``), of every secret-named ``NAME=value`` (``env HF_TOKEN=... cmd``) and every URL's password
    replaced by ``***``, and kit's own secrets masked as everywhere."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("--"):  # the value, even one that starts with a dash
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = arg.partition("=")
        head, colon, _ = arg.partition(":")
        if arg.startswith("-") and secret_name(name):
            out.append(f"{name}={MASK}" if eq else arg)
            hide_next = not eq
        elif eq and _ENV_ASSIGN.match(name) and secret_name(name):
            out.append(f"{name}={MASK}")
        elif colon and _HEADER.match(head) and secret_name(head):  # -H "Authorization: Bearer ..."
            out.append(f"{head}: {MASK}")
        elif any(c.isspace() for c in arg) and len(arg) <= MAX_NESTED and depth < MAX_DEPTH:  # sh -c "... --api-key K"
            try:
                out.append(shlex.quote(mask_argv(shlex.split(arg), depth=depth + 1)))
            except ValueError:  # not shell words
                out.append(_plain(arg))
        else:
            out.append(_plain(arg))
    return " ".join(out)


def _plain(arg: str) -> str:
    """One word: kit's own secrets, a URL's password and secret-named query parameters masked."""
    arg = _URL_PASSWORD.sub(rf"\1{MASK}@", redact(arg))
    return _QUERY.sub(lambda m: f"{m[1]}{m[2]}={MASK}" if secret_name(m[2]) else m[0], arg)
