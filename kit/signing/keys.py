"""OpenSSH Ed25519 keys: reading and writing key files, public key lines and fingerprints."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kit.errors import SignatureError, UsageError
from kit.plumbing.files import NOFOLLOW, TooLarge, read_bounded

MAX_KEY_BYTES = 64 << 10  # a key file: an Ed25519 private key is under 1 KiB (encrypted or not), its .pub one line


def public_key_line(pub: Ed25519PublicKey, comment: str = "") -> str:
    line = pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}".strip()


def fingerprint(pub: Ed25519PublicKey) -> str:
    """The OpenSSH fingerprint, as `ssh-keygen -lf` prints it (SHA256:...)."""
    blob = base64.b64decode(public_key_line(pub).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def parse_public_key(line: str) -> Ed25519PublicKey:
    parts = line.strip().split()
    if len(parts) < 2 or parts[0] != "ssh-ed25519":
        raise SignatureError(f"not an ssh-ed25519 public key: {line.strip()[:60]!r}")
    try:
        key = serialization.load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except (ValueError, binascii.Error) as e:
        raise SignatureError(f"unreadable ssh-ed25519 public key: {e}") from None
    assert isinstance(key, Ed25519PublicKey)
    return key


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    comment: str
    path: Path

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public)

    def public_line(self) -> str:
        return public_key_line(self.public, self.comment)


def generate_key(path: Path, comment: str, *, overwrite: bool = False, passphrase: str | None = None) -> SigningKey:
    """Write a new Ed25519 key pair to ``path`` and ``path.pub`` (private key mode 0600).

    Without a passphrase the private key is in OpenSSH format; with one it is an encrypted PKCS#8 PEM file
    (OpenSSH's own encrypted format needs bcrypt, which kit does not depend on); both load with
    ``load_signing_key`` (the passphrase from KIT_KEY_PASSPHRASE)."""
    public = Path(f"{path}.pub")
    for there in (path, public):
        if os.path.lexists(there) and (not overwrite or not there.is_file() or there.is_symlink()):
            raise UsageError(f"{there} already exists", hint="choose another path with -o, or remove the old key")
    if any(ord(c) < 32 or ord(c) == 127 for c in comment):
        raise UsageError(f"the key comment {comment!r} holds a control character",
                         hint="give a printable comment with -C, e.g. you@lab")
    key = Ed25519PrivateKey.generate()
    if passphrase:
        data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.BestAvailableEncryption(passphrase.encode()))
    else:
        data = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    signing = SigningKey(key, comment, path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = os.O_WRONLY | os.O_CREAT | NOFOLLOW | (os.O_TRUNC if overwrite else os.O_EXCL)  # never through a link
        with os.fdopen(os.open(path, new, 0o600), "wb") as f:
            f.write(data)
        with os.fdopen(os.open(public, new, 0o644), "w") as pub:
            pub.write(signing.public_line() + "\n")
    except OSError as e:
        raise UsageError(f"cannot write the key to {path}: {e.strerror or e}",
                         hint="choose a writable path with -o") from None
    return signing


def _load_private(data: bytes, pw: bytes | None) -> object:
    if b"OPENSSH PRIVATE KEY" in data:
        return serialization.load_ssh_private_key(data, password=pw)
    return serialization.load_pem_private_key(data, password=pw)


def load_signing_key(path: Path, passphrase: str | None = None) -> SigningKey:
    """Load an OpenSSH (or PEM) Ed25519 private key, e.g. ~/.ssh/id_ed25519."""
    data = _read_key_file(path, "key file", "give the private key itself: a regular file such as ~/.ssh/id_ed25519, "
                                            "or one made by `kit keygen -o FILE`")
    if data is None:
        raise UsageError(f"{path}: no such key file", hint="make one with `kit keygen -o FILE`")
    pw = passphrase.encode() if passphrase is not None else None
    key: object
    try:
        key = _load_private(data, pw)
    except TypeError as e:
        if pw is not None and "not encrypted" in str(e).lower():
            key = _load_private(data, None)  # a passphrase was set for another key; this one has none
        else:
            raise UsageError(
                f"{path}: the key is protected by a passphrase", hint="set KIT_KEY_PASSPHRASE to unlock it"
            ) from None
    except UnsupportedAlgorithm as e:  # a passphrase-protected OpenSSH key: cryptography reads it with bcrypt
        raise UsageError(f"{path}: cannot read this key here ({e})",
                         hint="install the bcrypt package beside kit (pip install bcrypt), or make a key with "
                              "`kit keygen` (encrypted with KIT_KEY_PASSPHRASE, read without bcrypt)") from None
    except ValueError as e:
        # An encrypted PEM key read with a wrong passphrase mostly fails its padding ("bad decrypt"), but about
        # once in 256 passphrases the padding happens to pass and the garbage fails to parse instead (PKCS#8's
        # "ENCRYPTED PRIVATE KEY", or the older "Proc-Type: 4,ENCRYPTED" header)
        if pw is not None and (b"ENCRYPTED" in data or "checksum" in str(e).lower() or "decrypt" in str(e).lower()):
            raise UsageError(f"{path}: wrong passphrase (KIT_KEY_PASSPHRASE), or a damaged encrypted key") from None
        raise UsageError(f"{path}: not a readable private key ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(
            f"{path}: only ssh-ed25519 keys can sign (this is a {type(key).__name__})",
            hint="make a dedicated key with `kit keygen` or `ssh-keygen -t ed25519`",
        )
    return SigningKey(key, _comment(Path(f"{path}.pub")), path)


def _read_key_file(path: Path, what: str, hint: str) -> bytes | None:
    """A key file's bytes (None when there is none), read as every outside file is: a regular file of at most
    MAX_KEY_BYTES, opened without blocking (a FIFO is refused at once); anything else is a UsageError naming it."""
    try:
        return read_bounded(path, MAX_KEY_BYTES)
    except FileNotFoundError:
        return None
    except TooLarge:
        why = f"larger than {MAX_KEY_BYTES} bytes; an Ed25519 key file is under 1 KiB"
    except OSError as e:  # a directory, FIFO, device, symlink loop, unreadable file (/proc/self/mem: EIO)
        why = e.strerror or str(e).removeprefix(f"{path}: ")
    raise UsageError(f"{path}: cannot be read as a {what} ({why})", hint=hint)


_PUB_HINT = ("the KEY.pub beside a key gives its comment: make it the key's one line, 'ssh-ed25519 KEY COMMENT' in "
             "UTF-8 (`ssh-keygen -y -f KEY > KEY.pub`), or remove it (the key then has no comment)")


def _comment(pub: Path) -> str:
    """The comment of the public key file beside a private key ("" when there is none): its first line's third
    field, so a .pub of several lines never puts a line break into a trust line."""
    data = _read_key_file(pub, "public key file", _PUB_HINT)
    if data is None:
        return ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{pub}: the public key file is not UTF-8 text (byte {e.start})",
                         hint=_PUB_HINT) from None
    lines = text.splitlines()
    parts = lines[0].split(maxsplit=2) if lines else []
    return parts[2].strip() if len(parts) > 2 else ""
