"""Differential test: kit.allowed_signers.decide versus Debian's `ssh-keygen -Y verify` on the same cases.

Every case is one allowed_signers text, an identity (-I), a namespace (-n), a verify time (-O verify-time=,
always given in UTC with a Z) and a TZ. The signer is always key 0; other keys appear as non-matching lines.
Hand-picked edge cases run in every time zone; a seeded random set adds 400 more (about 8 s in all, so
neither is marked slow). Both require 0 disagreements and print a summary.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kit import allowed_signers

SSH_KEYGEN = shutil.which("ssh-keygen")
ZONES = ("UTC", "America/New_York", "Asia/Kolkata")
NAMESPACES = ("kit-bundle", "kit-manifest", "file")
AT = datetime(2026, 7, 15, 12, 0, 0, tzinfo=UTC)  # in DST in New York: isdst=0 matters
DATA = b"kit differential test\n"


@dataclass(frozen=True)
class Case:
    text: str
    identity: str
    namespace: str
    at: datetime
    tz: str


@dataclass
class Keys:
    dir: Path
    pubs: list[str]  # "ssh-ed25519 BASE64"
    key0: Ed25519PublicKey


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    if SSH_KEYGEN is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed")
    d = tmp_path_factory.mktemp("sshdiff")
    pubs = []
    for i in range(3):
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", f"k{i}", "-f", str(d / f"k{i}")], check=True)
        pubs.append(" ".join((d / f"k{i}.pub").read_text().split()[:2]))
    (d / "data").write_bytes(DATA)
    for ns in NAMESPACES:
        subprocess.run([SSH_KEYGEN, "-q", "-Y", "sign", "-f", str(d / "k0"), "-n", ns, str(d / "data")], check=True)
        (d / "data.sig").rename(d / f"{ns}.sig")
    k0 = serialization.load_ssh_public_key(pubs[0].encode())
    assert isinstance(k0, Ed25519PublicKey)
    yield Keys(d, pubs, k0)


def ts(t: datetime, fmt: str = "%Y%m%d%H%M%S", suffix: str = "Z") -> str:
    return t.astimezone(UTC).strftime(fmt) + suffix


def hand_lines(k: Keys) -> list[tuple[str, str, str]]:
    """(allowed_signers text, identity, namespace) edge cases; all verified at AT."""
    k0, k1 = k.pubs[0], k.pubs[1]
    bad_b64 = k0[:-4] + "AAAA"
    day = AT.strftime("%Y%m%d")
    out = [
        (f"alice {k0}\n", "alice", "kit-bundle"),
        (f"alice {k1}\n", "alice", "kit-bundle"),
        (f"bob {k0}\n", "alice", "kit-bundle"),
        (f"ALICE {k0}\n", "alice", "kit-bundle"),
        (f"* {k0}\n", "alice", "kit-bundle"),
        (f"a?ice {k0}\n", "alice", "kit-bundle"),
        (f"al* {k0}\n", "alice", "kit-bundle"),
        (f"*@example.com {k0}\n", "alice@example.com", "kit-bundle"),
        (f"bob,alice {k0}\n", "alice", "kit-bundle"),
        (f"*,!alice {k0}\n", "alice", "kit-bundle"),
        (f"!bob,* {k0}\n", "alice", "kit-bundle"),
        (f"!alice {k0}\n", "alice", "kit-bundle"),
        (f'"alice" {k0}\n', "alice", "kit-bundle"),
        (f'"al ice" {k0}\n', "al ice", "kit-bundle"),
        (f'"alice {k0}\n', "alice", "kit-bundle"),
        (f"alice\t{k0}\n", "alice", "kit-bundle"),
        (f"  alice  {k0}  trailing comment\n", "alice", "kit-bundle"),
        (f"alice {k0}\r\n", "alice", "kit-bundle"),
        (f"alice {k0} comment\r\n", "alice", "kit-bundle"),
        (f"# alice {k0}\n", "alice", "kit-bundle"),
        (f"alice {k0}", "alice", "kit-bundle"),
        (f"alice {bad_b64}\n", "alice", "kit-bundle"),
        (f"alice ssh-rsa {k0.split()[1]}\n", "alice", "kit-bundle"),
        ("alice ssh-ed25519\n", "alice", "kit-bundle"),
        (f"garbage line\nalice {k0}\n", "alice", "kit-bundle"),
        (f"alice cert-authority {k0}\n", "alice", "kit-bundle"),
        (f"alice CERT-AUTHORITY {k0}\n", "alice", "kit-bundle"),
        (f'alice namespaces="kit-bundle" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="kit-bundle" {k0}\n', "alice", "kit-manifest"),
        (f'alice namespaces="" {k0}\n', "alice", "kit-bundle"),
        (f"alice namespaces {k0}\n", "alice", "kit-bundle"),
        (f"alice namespaces= {k0}\n", "alice", "kit-bundle"),
        (f"alice namespaces=kit-bundle {k0}\n", "alice", "kit-bundle"),
        (f'alice NameSpaces="kit-*" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="kit-?undle" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="*,!kit-bundle" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="file, kit-bundle" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="file,kit-bundle" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="kit-bundle",namespaces="file" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="kit-bundle", {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="kit-bundle",foo {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="kit-\\"bundle" {k0}\n', "alice", "kit-bundle"),
        (f'alice namespaces="kit-bundle" cert-authority {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="" {k0}\n', "alice", "kit-bundle"),
        (f"alice valid-after=20260101 {k0}\n", "alice", "kit-bundle"),
        (f'alice valid-after="{day}" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="{day}Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="{day}" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="{day}UTC" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20261231" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="202607151200" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="202607151200Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="202607151200z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="202607151200" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="20260715115959Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20260715120001Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20260715120000Z",valid-before="20260715120000Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20260101Z",valid-before="20270101Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20260101Z",valid-after="20250101Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="19700101Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="19700101" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="19691231235961Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20260715115960Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20260715115961Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-after="20260715115962Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="20260631Z" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="20260731" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="20261301" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="2026123" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="202612312400" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="2026 731" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="2026-7-3" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="99991231" {k0}\n', "alice", "kit-bundle"),
        (f'alice valid-before="20270101 " {k0}\n', "alice", "kit-bundle"),
    ]
    # local times around AT in each zone: New York in July must be read as EST (mktime with tm_isdst=0)
    for local in ("202607150700", "202607150730", "20260715080000", "202607151730", "202607151800"):
        out.append((f'alice valid-after="{local}" {k0}\n', "alice", "kit-bundle"))
        out.append((f'alice valid-before="{local}" {k0}\n', "alice", "kit-bundle"))
    return out


def hand_cases(k: Keys) -> list[Case]:
    return [Case(t, i, ns, AT, tz) for tz in ZONES for t, i, ns in hand_lines(k)]


TIME_FORMATS = ("%Y%m%d", "%Y%m%d%H%M", "%Y%m%d%H%M%S")
SUFFIXES = ("", "Z", "z", "UTC", "utc")


def random_time(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.08:
        return rng.choice(["", "0", "2026", "20261301", "20260230", "20260631", "202607151260", "2026071512", "x" * 8])
    delta = timedelta(seconds=rng.choice([0, 1, -1, 59, -59, 3600, -3600, 4 * 3600, -5 * 3600, 86400, -86400,
                                           30 * 86400, -400 * 86400, rng.randint(-10**7, 10**7)]))  # fmt: skip
    fmt = rng.choice(TIME_FORMATS)
    suffix = rng.choice(SUFFIXES)
    t = AT + delta
    return (t.astimezone(UTC) if suffix else t.replace(tzinfo=None)).strftime(fmt) + suffix


def random_options(rng: random.Random) -> str:
    opts: list[str] = []
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        r = rng.random()
        if r < 0.15:
            opts.append(rng.choice(["cert-authority", "Cert-Authority", "foo", "namespaces", "valid-after"]))
        elif r < 0.5:
            pats = rng.sample(["kit-bundle", "kit-manifest", "file", "kit-*", "*", "!kit-bundle", "?it-bundle",
                               "", "git", "!file", "kit-bundl"], rng.randint(0, 3))  # fmt: skip
            value = ",".join(pats)
            opts.append(
                rng.choice(["namespaces", "NAMESPACES"]) + (f'="{value}"' if rng.random() < 0.93 else f"={value}")
            )
        else:
            name = rng.choice(["valid-after", "valid-before", "Valid-Before"])
            value = random_time(rng)
            opts.append(f'{name}="{value}"' if rng.random() < 0.93 else f"{name}={value}")
    text = ",".join(opts)
    if opts and rng.random() < 0.05:
        text += ","
    return text


def random_line(rng: random.Random, k: Keys) -> str:
    principals = ",".join(rng.sample(["alice", "bob", "*", "al*", "!alice", "!bob", "a?ice", "*@example.com",
                                      "alice@example.com", "ALICE", "!*"], rng.randint(1, 3)))  # fmt: skip
    if rng.random() < 0.05:
        principals = f'"{principals}"'
    key = rng.choice([k.pubs[0]] * 6 + [k.pubs[1], k.pubs[2], "ssh-rsa " + k.pubs[0].split()[1], k.pubs[0][:-2]])
    opts = random_options(rng)
    sep = rng.choice([" ", " ", "\t", "  "])
    parts = [principals, *([opts] if opts else []), key]
    line = sep.join(parts)
    if rng.random() < 0.2:
        line += " comment " + rng.choice(["k0", "#x", "valid-before"])
    if rng.random() < 0.1:
        line = " " + line
    return line + rng.choice(["\n", "\n", "\n", "\r\n"])


def random_cases(k: Keys, n: int, seed: int = 20260715) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        lines = [random_line(rng, k) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        if rng.random() < 0.1:
            lines.insert(0, "# a comment\n")
        identity = rng.choice(["alice", "alice", "bob", "alice@example.com", "ALICE"])
        at = AT + timedelta(seconds=rng.choice([0, 0, 1, -1, 3600, -86400]))
        cases.append(Case("".join(lines), identity, rng.choice(NAMESPACES), at, ZONES[i % len(ZONES)]))
    return cases


def run_openssh(k: Keys, cases: list[Case]) -> list[bool]:
    def one(i: int) -> bool:
        c = cases[i]
        f = k.dir / f"allowed-{i}"
        f.write_text(c.text)
        cmd = [SSH_KEYGEN or "ssh-keygen", "-Y", "verify", "-f", str(f), "-I", c.identity, "-n", c.namespace,
               "-s", str(k.dir / f"{c.namespace}.sig"), "-O", f"verify-time={ts(c.at)}"]  # fmt: skip
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TZ": c.tz, "LC_ALL": "C"}
        p = subprocess.run(cmd, input=DATA, capture_output=True, env=env, check=False)
        return p.returncode == 0

    with ThreadPoolExecutor(max_workers=4) as ex:
        return list(ex.map(one, range(len(cases))))


def run_kit(k: Keys, cases: list[Case]) -> list[bool]:
    old = os.environ.get("TZ")
    out = []
    try:
        for c in cases:
            os.environ["TZ"] = c.tz
            time.tzset()
            entries = allowed_signers.parse(c.text, "allowed_signers")
            out.append(bool(allowed_signers.decide(entries, k.key0, c.identity, c.namespace, c.at)))
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()
    return out


def compare(k: Keys, cases: list[Case], label: str) -> None:
    ssh = run_openssh(k, cases)
    ours = run_kit(k, cases)
    bad = [(c, s, o) for c, s, o in zip(cases, ssh, ours, strict=True) if s != o]
    print(f"\n{label}: cases={len(cases)} accepts={sum(ssh)} rejects={len(ssh) - sum(ssh)} disagreements={len(bad)}")
    for c, s, o in bad[:20]:
        print(f"  openssh={'accept' if s else 'reject'} kit={'accept' if o else 'reject'} tz={c.tz} "
              f"-I {c.identity!r} -n {c.namespace} at={ts(c.at)}\n    {c.text!r}")  # fmt: skip
    assert not bad, f"{len(bad)} disagreements with ssh-keygen -Y verify"
    assert 0 < sum(ssh) < len(ssh)


def test_edge_cases_match_openssh(keys: Keys) -> None:
    compare(keys, hand_cases(keys), "edge cases x time zones")


def test_random_cases_match_openssh(keys: Keys) -> None:
    compare(keys, random_cases(keys, 400), "seeded random cases")
