"""The one redaction rule (kit.plumbing.redact) and the places that apply it to text from a server: every form of
a secret masked, a cut never leaves a prefix or a suffix of one, a stream gives what the whole text gives, and the
metric labels, SSE error events and bundle files written from a server's answers hold none (review 21)."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from urllib.parse import quote

import pytest

from kit.bundle import Bundle
from kit.load.sse import error_message
from kit.plumbing.redact import (
    StreamRedactor,
    header_secrets,
    redact,
    redact_json,
    rule,
    secrets_added,
    secrets_from_env,
)
from kit.telemetry.prom import all_samples, parse

SECRET = "hf_Qz7/Pa+ss<Secret>&Xk9Vw2LmNb"


def escaped_forms(s: str) -> list[str]:
    plain = json.dumps(s)[1:-1]
    return [
        s, plain, plain.replace("/", "\\/"),  # \/ as PHP and others write it
        plain.replace("<", "\\u003c").replace("&", "\\u0026"),  # Go's encoding/json
        plain.replace("<", "\\u003C").replace("/", "\\u002F"),  # upper-case hex
        "".join(f"\\u{ord(c):04x}" for c in s),  # every character escaped
        quote(s, safe=""), base64.b64encode(s.encode()).decode(), base64.urlsafe_b64encode(s.encode()).decode(),
    ]


@pytest.mark.parametrize("form", escaped_forms(SECRET))
def test_every_form_is_masked(form: str) -> None:
    with secrets_added([SECRET]):
        assert redact(f"before {form} after") == "before *** after"


def test_a_logged_prefix_or_the_value_in_another_case_is_masked() -> None:
    """An outside review (2026-12-07): a server that logged `token hf_secretval...` kept 12 of an 18-character
    token in server.log, and the value upper-cased was kept whole."""
    token = "hf_secretvalue1234"
    with secrets_added([token]):
        assert redact("token hf_secretval... loaded") == "token ***... loaded"
        assert redact(f"TOKEN={token.upper()} token={token.lower()}") == "TOKEN=*** token=***"
        assert redact("hf_secre is the kind of token") == "hf_secre is the kind of token"  # under half: kept
    with secrets_added(["password1"]):  # too short for its prefixes: "passw..." is ordinary text
        assert redact("password1 or password") == "*** or password"


def test_nothing_is_masked_without_secrets() -> None:
    with secrets_added(()):
        assert redact("hf_Qz7 anything") == "hf_Qz7 anything" and redact_json({"a": ["b"]}) == {"a": ["b"]}


def test_a_cut_text_keeps_no_part_of_a_secret_at_the_cut() -> None:
    """A bounded read may end inside a secret (cut_end), a tail begin inside one (cut_start): no prefix or suffix of
    it is kept (a whole one near the cut is masked), and the mask never says how long it was."""
    with secrets_added([SECRET]):
        for k in range(1, len(SECRET)):
            end = redact("error: " + SECRET[:k], cut_end=True)
            start = redact(SECRET[k:] + " rest of the log", cut_start=True)
            for piece in (end, start):
                assert not any(SECRET[i:i + 3] in piece for i in range(len(SECRET) - 2)), (k, piece)
        assert redact("x " + SECRET + "." * 300, cut_end=True).startswith("x ***.")
    with secrets_added([SECRET, SECRET * 3]):
        assert redact(f"a{SECRET}b{SECRET * 3}c") == "a***b***c"


def test_a_stream_is_masked_as_the_whole_text_is() -> None:
    rnd = random.Random(21)
    parts = ["line\n", "x" * 40, SECRET, json.dumps(SECRET)[1:-1].replace("/", "\\/"), "\n", "\\u0068f_"]
    with secrets_added([SECRET]):
        for _ in range(200):
            text = "".join(rnd.choice(parts) for _ in range(30))
            s = StreamRedactor(max_line=rnd.choice([8, 64, 4096]))
            out, i = [], 0
            while i < len(text):
                n = rnd.randint(1, 40)
                out.append(s.feed(text[i:i + n]))
                i += n
            assert "".join(out) + s.end() == redact(text)


def test_header_secrets_include_the_credentials_after_the_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    basic = "Basic " + base64.b64encode(b"alice:s3cret-pass").decode()
    assert header_secrets("Bearer sk-abcdef123") == ["Bearer sk-abcdef123", "sk-abcdef123"]
    assert header_secrets(basic)[1:] == [basic[6:], "alice:s3cret-pass", "s3cret-pass"]
    assert header_secrets("plainvalue") == ["plainvalue"]
    monkeypatch.setenv("KIT_TEST_AUTH", "Bearer sk-abcdef123")
    with secrets_added(()):
        assert secrets_from_env(["KIT_TEST_AUTH", "KIT_TEST_UNSET"], headers=True) == {
            "KIT_TEST_AUTH": "Bearer sk-abcdef123"}
        assert redact("the server said: bad token sk-abcdef123") == "the server said: bad token ***"
    assert "sk-abcdef123" not in rule().values  # the set before is back


def test_metric_labels_are_masked_before_they_become_series_keys() -> None:
    text = (f'kit_engine_requests_running{{token="{SECRET}",x="a"}} 1\n'
            f'other{{v="{json.dumps(SECRET)[1:-1]}"}} 2\n')
    with secrets_added([SECRET]):
        scrape = parse(text, max_parsed=100, max_series=100)
        samples = all_samples(text, max_parsed=100)
    assert list(scrape.series) == ['kit_engine_requests_running{token="***",x="a"}']
    assert set(samples) == {'kit_engine_requests_running{token="***",x="a"}', 'other{v="***"}'}


def test_an_sse_error_event_is_masked_before_it_is_cut() -> None:
    """The message is cut at 200 characters: masked first, so a secret across the cut leaves no prefix."""
    for pad in (0, 190, 195):
        payload = json.dumps({"error": {"message": "x" * pad + "key " + SECRET + " rejected"}})
        payload = payload.replace("/", "\\/").encode()
        with secrets_added([SECRET]):
            msg = error_message(payload)
        assert msg is not None and SECRET[:4] not in msg and len(msg) <= 200


def test_bundle_json_files_are_masked_keys_and_values(tmp_path: Path) -> None:
    bundle = Bundle.create(tmp_path, "exp", run_id="abc123")
    with secrets_added([SECRET]):
        bundle.write_json("x.json", {"error": f"http 500: {SECRET}", SECRET: [1, f"{SECRET}!"]})
        bundle.append_jsonl("y.jsonl", {"series": {f'm{{t="{SECRET}"}}': 1.0}})
    assert json.loads(bundle.path("x.json").read_text()) == {"error": "http 500: ***", "***": [1, "***!"]}
    assert json.loads(bundle.path("y.jsonl").read_text()) == {"series": {'m{t="***"}': 1.0}}
