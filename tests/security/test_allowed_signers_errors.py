"""kit.allowed_signers: the error messages (source:line and the fix) and the fail-closed rules of issue 9."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kit import allowed_signers as a
from kit.errors import ExitCode, SignatureError
from kit.plumbing.sshtext import match_pattern_list, parse_time

AT = datetime(2026, 7, 15, 12, 0, tzinfo=UTC)


def _pub() -> tuple[Ed25519PublicKey, str]:
    pub = Ed25519PrivateKey.generate().public_key()
    return pub, pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@pytest.fixture
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("alice", "missing key"),
        ('"alice ssh-ed25519 AAAA', "unclosed quote"),
        ("alice namespaces", "missing key"),
        ("alice ssh-ed25519 AAAAnotakey", "invalid key"),
        ('alice namespaces="a" ssh-ed25519', "invalid key"),
        ('alice namespaces="a ssh-ed25519 AAAA', "unclosed quote"),
        ("alice namespaces {key}", "unknown key option"),
        ("alice namespaces=kit-bundle {key}", "double quotes"),
        ('alice namespaces="a",namespaces="b" {key}', "multiple"),
        ('alice namespaces="a", {key}', "trailing comma"),
        ('alice valid-before="" {key}', 'invalid "valid-before" time'),
        ('alice valid-after="2026-12-31" {key}', 'invalid "valid-after" time'),
        ('alice valid-after="20270101Z",valid-before="20260101Z" {key}', "before"),
        ("alice nope {key}", "unknown key option"),
    ],
)
def test_bad_line_names_source_line_and_fix(line: str, words: str) -> None:
    _, key = _pub()
    text = f"# trust\n\n{line.format(key=key)}\n"
    with pytest.raises(SignatureError) as e:
        a.parse(text, "/home/u/.config/kit/allowed_signers", strict=True)
    assert str(e.value).startswith("/home/u/.config/kit/allowed_signers:3: ")
    assert words in e.value.message
    assert e.value.hint
    assert e.value.exit_code == ExitCode.SIGNATURE
    # without strict: OpenSSH skips the line (never fatal), and it allows nothing
    entries = a.parse(text, "t")
    assert [str(p).split("\n")[0][:4] for p in a.problems(entries)] == ["t:3:"]
    assert all(e.key is None for e in entries)


def test_bad_line_is_skipped_like_openssh_and_good_lines_still_count() -> None:
    pub, key = _pub()
    entries = a.parse(f"alice nope {key}\nalice {key}\n", "t")
    assert [e.source for e in a.decide(entries, pub, "alice", "kit-bundle", AT)] == ["t:2"]
    assert "t:1: skipped" in a.explain(entries, pub, "alice", "kit-bundle", AT)[0]


def test_other_key_types_are_entries_not_errors() -> None:
    pub, _ = _pub()
    entries = a.parse("bob ssh-rsa AAAAB3NzaC1yc2E= bob@host\nbob cert-authority ssh-ed25519 AAAA\n", "t")
    assert entries[0].key_type == "ssh-rsa" and entries[0].problem is None and entries[0].key is None
    assert not a.decide(entries, pub, "bob", "kit-bundle", AT)


def test_namespaces_empty_allows_nothing_and_wildcards_work() -> None:
    pub, key = _pub()
    assert not a.decide(a.parse(f'alice namespaces="" {key}', "t"), pub, "alice", "kit-bundle", AT)
    ok = a.parse(f'alice namespaces="kit-*,!kit-manifest" {key}', "t")
    assert a.decide(ok, pub, "alice", "kit-bundle", AT)
    assert not a.decide(ok, pub, "alice", "kit-manifest", AT)
    assert "namespace 'kit-manifest'" in a.explain(ok, pub, "alice", "kit-manifest", AT)[0]


def test_times(utc: None) -> None:
    assert parse_time("20261231") == int(datetime(2026, 12, 31, tzinfo=UTC).timestamp())  # not 2026-01-02 03:01
    assert parse_time("202612310101") == int(datetime(2026, 12, 31, 1, 1, tzinfo=UTC).timestamp())
    assert parse_time("20260231Z") == int(datetime(2026, 3, 3, tzinfo=UTC).timestamp())  # mktime normalises
    assert parse_time("19700101Z") == 0  # and 0 makes the option invalid
    assert parse_time("20261301") is None and parse_time("") is None and parse_time("2026123") is None
    pub, key = _pub()
    entries = a.parse(f'alice valid-after="20260715120000Z",valid-before="20260715120010Z" {key}', "t")
    assert a.decide(entries, pub, "alice", "x", AT)  # both bounds inclusive
    assert not a.decide(entries, pub, "alice", "x", datetime(2026, 7, 15, 11, 59, 59, 999999, tzinfo=UTC))
    assert "expired" in a.explain(entries, pub, "alice", "x", datetime(2026, 7, 15, 12, 0, 11, tzinfo=UTC))[0]
    with pytest.raises(ValueError, match="timezone-aware"):
        a.decide(entries, pub, "alice", "x", datetime(2026, 7, 15, 12))


def test_local_time_is_standard_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:  # July is EDT, but OpenSSH's mktime(tm_isdst=0) reads the time as EST (UTC-5)
        assert parse_time("202607150700") == int(datetime(2026, 7, 15, 12, tzinfo=UTC).timestamp())
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_principals_patterns_and_any_identity() -> None:
    assert match_pattern_list(b"alice", b"*,!alice") == -1
    assert match_pattern_list(b"alice", b"a?ice") == 1
    assert match_pattern_list(b"alice", b"ALICE") == 0
    assert match_pattern_list(b"alice", b"alice," + b"x" * 1023) == 0  # OpenSSH gives up on long subpatterns
    pub, key = _pub()
    entries = a.parse(f'"bob smith,!alice" {key}', "t")
    assert not a.decide(entries, pub, "alice", "x", AT)
    assert a.decide(entries, pub, None, "x", AT)  # identity None: any principal (find-principals)
    assert a.decide(entries, pub, "bob smith", "x", AT)
    # the quote ends the principals token: what follows it is read as options (OpenSSH's strdelimw)
    assert "unknown key option" in (a.parse(f'"bob smith",!alice {key}', "t")[0].problem or "")
