"""The manifest's untimed quality check on a cell's ready server: few-shot questions with a numeric answer
(GSM8K's format), asked through the load's endpoint at temperature 0, the answer's last number compared with the
label's ``#### N`` (as sglang's ``few_shot_gsm8k`` does). Bounded: the dataset file (MAX_DATASET_BYTES), each
answer (MAX_ANSWER_BYTES), each request (``request_timeout_s``)."""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kit.errors import ManifestError
from kit.files.quality import QualityFile, QualityItem, wilson
from kit.load.prompts import ENDPOINT_PATHS
from kit.manifest.quality import Quality
from kit.plumbing.jsontypes import loads
from kit.plumbing.net import request
from kit.plumbing.redact import redact

MAX_DATASET_BYTES = 64 * 1024 * 1024
MAX_ANSWER_BYTES = 1024 * 1024
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _normal(number: str) -> str:
    text = number.replace(",", "")
    return text[:-2] if text.endswith(".0") else text


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return _normal(found[-1]) if found else None


def load_items(q: Quality) -> tuple[list[tuple[str, str]], str]:
    """(question, answer) items and the file's sha256; ManifestError naming the file and the line when bad."""
    path = Path(q.dataset)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_DATASET_BYTES + 1)
    except OSError as e:
        raise ManifestError(f"quality.dataset {q.dataset}: {e.strerror or e}",
                            hint="give a JSONL file of {question, answer} items (GSM8K's test.jsonl)") from None
    if len(data) > MAX_DATASET_BYTES:
        raise ManifestError(f"quality.dataset {q.dataset}: larger than {MAX_DATASET_BYTES} bytes",
                            hint="keep the items the check asks (shots + questions)")
    items = []
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = loads(line)
            question, answer = item["question"], item["answer"]
        except (ValueError, TypeError, KeyError):
            raise ManifestError(f"quality.dataset {q.dataset} line {n}: not a JSON object with question and answer",
                                hint="one {\"question\": ..., \"answer\": \"... #### N\"} per line") from None
        if not isinstance(question, str) or not isinstance(answer, str) or "####" not in answer:
            raise ManifestError(f"quality.dataset {q.dataset} line {n}: the answer does not end in '#### N'",
                                hint="GSM8K's format: the worked answer, then '#### ' and the number")
        items.append((question, answer))
    if len(items) < q.shots + q.questions:
        raise ManifestError(f"quality.dataset {q.dataset}: {len(items)} items; shots + questions need "
                            f"{q.shots + q.questions}", hint="lower quality.questions or give a larger file")
    return items, hashlib.sha256(data).hexdigest()


def prompt(shots: list[tuple[str, str]], question: str) -> str:
    demos = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in shots)
    return f"{demos}Question: {question}\nAnswer:"


def ask_completion(url: str, body: bytes, timeout: float,
                   context: ssl.SSLContext | None) -> tuple[str | None, str | None]:
    """POST one completion request: (its text, None), or (None, why there is none); the answer bounded."""
    try:
        status, raw = request(url, method="POST", body=body, headers={"Content-Type": "application/json"},
                              timeout=timeout, max_bytes=MAX_ANSWER_BYTES, context=context)
    except (OSError, ValueError, http.client.HTTPException) as e:
        return None, redact(f"no answer: {e}")  # an exception's text may quote what the server sent
    if status != 200:
        return None, f"HTTP {status}"
    if len(raw) > MAX_ANSWER_BYTES:
        return None, f"answer larger than {MAX_ANSWER_BYTES} bytes"
    try:
        choice = loads(raw)["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError):  # TooDeep is a ValueError
        return None, "not an OpenAI-style completion"
    return (text if isinstance(text, str) else ""), None


def run_quality(q: Quality, base_url: str, model: str, endpoint: str,
                context: ssl.SSLContext | None = None) -> QualityFile:
    items, sha = load_items(q)
    shots, asked = items[: q.shots], list(enumerate(items))[q.shots: q.shots + q.questions]
    url = base_url + ENDPOINT_PATHS[endpoint]

    def one(entry: tuple[int, tuple[str, str]]) -> QualityItem:
        index, (question, answer) = entry
        text = prompt(shots, question)
        fields = {"model": model, "max_tokens": q.max_tokens, "temperature": 0, "stop": ["\n\nQuestion:"]}
        payload = {**fields, "messages": [{"role": "user", "content": text}]} if endpoint == "chat" else {
            **fields, "prompt": text}
        reply, error = ask_completion(url, json.dumps(payload).encode(), q.request_timeout_s, context)
        label = _normal(answer.rsplit("####", 1)[1].strip())
        got = None if reply is None else last_number(reply)
        return QualityItem(index=index, label=label, predicted=got, ok=got == label, error=error)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=q.concurrency) as pool:
        results = list(pool.map(one, asked))
    correct = sum(r.ok for r in results)
    return QualityFile(
        dataset=q.dataset, dataset_sha256=sha, shots=q.shots, concurrency=q.concurrency, max_tokens=q.max_tokens,
        asked=len(results), correct=correct, no_number=sum(r.error is None and r.predicted is None for r in results),
        errors=sum(r.error is not None for r in results), accuracy=round(correct / len(results), 6),
        interval_95=wilson(correct, len(results)), wall_s=round(time.monotonic() - t0, 3), items=results)
