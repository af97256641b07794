"""The datasets against references written here from sglang's bench_serving source (python/sglang/bench_serving.py,
sample_random_requests and sample_sharegpt_requests), and the token-exact cuts against a count made here."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from kit.errors import ManifestError
from kit.manifest.load import Load
from kit.manifest.workload import RandomSet, RequestOptions
from kit.workload import Workload, encode_lines
from kit.workload.corpus import corpus_text
from kit.workload.sources import random_lengths


def sglang_random_lengths(input_len: int, output_len: int, n: int, range_ratio: float,
                          seed: int) -> tuple[list[int], list[int]]:
    """sglang's formula, as its source writes it: np.random.seed(args.seed) at start, then two randint calls."""
    np.random.seed(seed)
    input_lens = np.random.randint(max(int(input_len * range_ratio), 1), input_len + 1, size=n)
    output_lens = np.random.randint(int(output_len * range_ratio), output_len + 1, size=n)
    return [int(x) for x in input_lens], [int(x) for x in output_lens]


@pytest.mark.parametrize(("il", "ol", "ratio", "seed"), [(1024, 1024, 0.0, 1), (512, 128, 0.5, 7),
                                                        (100, 8, 0.8, 0), (32, 1, 1.0, 3), (5, 1, 0.5, 2)])
def test_random_lengths_equal_sglangs(il: int, ol: int, ratio: float, seed: int) -> None:
    n = 500
    ds = RandomSet(kind="random", input_len=il, output_len=ol, range_ratio=ratio)
    kit_in, kit_out = random_lengths(ds, n, seed)
    ref_in, ref_out = sglang_random_lengths(il, ol, n, ratio, seed)
    assert kit_in == ref_in
    # the one difference, by design: sglang can draw an output length of 0 (int(output_len * ratio) == 0); a
    # request cannot ask for 0 tokens, so kit asks for 1 there
    assert kit_out == [max(1, x) for x in ref_out]
    if int(ol * ratio) == 0 and ol < 8:  # then a 0 is drawn often
        assert 0 in ref_out and 0 not in kit_out


def words_load(**dataset: object) -> Load:
    return Load.model_validate({"levels": [1], "prompt_tokens": 17, "output_tokens": 5, "seed": 3,
                                "dataset": dataset, "tokenizer": "words"})


def words(text: str) -> int:
    return len(text.split())


def test_text_prompts_are_token_exact_and_differ() -> None:
    items = Workload(words_load(kind="text"), None).level(40, seed=9)
    assert [it.i for it in items] == list(range(40))
    for it in items:
        assert it.messages is not None and len(it.messages) == 1
        assert words(it.messages[0].content) == 17 == it.prompt_tokens == it.content_tokens
        assert it.max_tokens == 5
    assert len({it.messages[0].content for it in items if it.messages}) == 40
    # the text is the corpus's: every prompt is a run of its words
    corpus = " ".join(corpus_text().split())
    assert all(" ".join(it.messages[0].content.split()) in corpus for it in items if it.messages)


def test_random_prompts_have_sglangs_lengths() -> None:
    items = Workload(words_load(kind="random", input_len=60, output_len=20, range_ratio=0.25), None).level(50, 4)
    ref_in, ref_out = sglang_random_lengths(60, 20, 50, 0.25, 4)
    assert [words(it.messages[0].content) for it in items if it.messages] == ref_in
    assert [it.max_tokens for it in items] == ref_out


def test_same_inputs_same_bytes() -> None:
    a = encode_lines(Workload(words_load(kind="text"), None).level(10, 1))
    b = encode_lines(Workload(words_load(kind="text"), None).level(10, 1))
    c = encode_lines(Workload(words_load(kind="text"), None).level(10, 2))
    assert a == b != c


def test_shared_prefix_groups_share_their_system_prompt() -> None:
    ds = {"kind": "shared-prefix", "groups": 3, "prompts_per_group": 4, "system_prompt_len": 30, "question_len": 6,
          "output_len": 7}
    items = Workload(words_load(**ds), None).level(12, 5)
    by_group: dict[str, set[str]] = {}
    for it in items:
        assert it.messages is not None and it.group is not None
        system, question = it.messages[0].content.split("\n\n")
        assert words(system) == 30 and words(question) == 6 and it.max_tokens == 7
        by_group.setdefault(it.group, set()).add(system)
    assert sorted(by_group) == ["g0", "g1", "g2"] and all(len(s) == 1 for s in by_group.values())
    assert sum(1 for _ in items) == 12 and len({it.messages[0].content for it in items if it.messages}) == 12


def test_multi_turn_sessions_grow_by_one_exchange() -> None:
    items = Workload(words_load(kind="multi-turn", turns=3, turn_len=5, output_len=4), None).level(7, 1)
    assert [it.group for it in items] == ["s0"] * 3 + ["s1"] * 3 + ["s2"]
    for t, it in enumerate(items[:3]):
        assert it.messages is not None
        assert [m.role for m in it.messages] == ["user", "assistant"] * t + ["user"]
        assert it.prompt_tokens == 5 * (t + 1) + 4 * t  # the engine counts every message's words
        if t:
            prev = items[t - 1].messages
            assert prev is not None and it.messages[:len(prev)] == prev


def pinned(path: Path, data: bytes) -> dict[str, str]:
    path.write_bytes(data)
    return {"path": str(path), "sha256": hashlib.sha256(data).hexdigest()}


def test_jsonl_prompts_messages_and_output_lengths(tmp_path: Path) -> None:
    lines = [{"prompt": "one two three"}, {"messages": [{"role": "system", "content": "be brief"},
                                                        {"role": "user", "content": "why so"}], "output_tokens": 9}]
    f = pinned(tmp_path / "p.jsonl", "\n".join(json.dumps(x) for x in lines).encode())
    items = Workload(words_load(kind="jsonl", file=f), None).level(5, 0)
    assert [it.max_tokens for it in items] == [5, 9, 5, 9, 5]  # cycled; default load.output_tokens
    assert items[1].messages is not None and [m.role for m in items[1].messages] == ["system", "user"]
    assert [it.prompt_tokens for it in items[:2]] == [3, 4]


def sglang_sharegpt(dataset: list[dict[str, object]], n: int, seed: int, fixed: int | None) -> list[tuple[str, int]]:
    """sample_sharegpt_requests as sglang writes it (random.seed(seed) first; a word tokenizer here)."""
    random.seed(seed)
    convs = [d.get("conversations", d.get("conversation", [])) for d in dataset]
    pairs = [(c[0]["value"], c[1]["value"]) for c in convs if len(c) >= 2]  # type: ignore[index,arg-type]
    random.shuffle(pairs)
    out: list[tuple[str, int]] = []
    for prompt, completion in pairs:
        if len(out) == n:
            break
        p, o = words(prompt), (words(completion) if fixed is None else fixed)
        if p < 2 or o < 2:
            continue
        out.append((prompt, o))
    return out


@pytest.mark.parametrize("fixed", [None, 12])
def test_sharegpt_follows_sglang(tmp_path: Path, fixed: int | None) -> None:
    rng = random.Random(0)
    text = corpus_text().split()
    def turn(k: int) -> str:
        s = rng.randrange(len(text) - k)
        return " ".join(text[s:s + k])
    data = [{"conversations": [{"from": "human", "value": turn(rng.randint(1, 30))},
                               {"from": "gpt", "value": turn(rng.randint(1, 40))}][: rng.choice([1, 2, 2, 2])]}
            for _ in range(60)]
    f = pinned(tmp_path / "sg.json", json.dumps(data).encode())
    items = Workload(words_load(kind="sharegpt", file=f, output_len=fixed), None).level(20, 11)
    ref = sglang_sharegpt(data, 20, 11, fixed)
    assert [(it.messages[0].content, it.max_tokens) for it in items if it.messages] == ref


def test_a_changed_file_is_refused_with_its_hashes(tmp_path: Path) -> None:
    f = pinned(tmp_path / "p.jsonl", b'{"prompt": "a b"}\n')
    (tmp_path / "p.jsonl").write_bytes(b'{"prompt": "a b c"}\n')
    with pytest.raises(ManifestError, match="but the manifest pins"):
        Workload(words_load(kind="jsonl", file=f), None).level(1, 0)


def test_bad_jsonl_names_the_line(tmp_path: Path) -> None:
    f = pinned(tmp_path / "p.jsonl", b'{"prompt": "a b"}\n{"nope": 1}\n')
    with pytest.raises(ManifestError, match="item 2 has neither"):
        Workload(words_load(kind="jsonl", file=f), None).level(1, 0)


def test_request_options_refuse_what_kit_sets() -> None:
    with pytest.raises(ValueError, match="extra_body may not set max_tokens"):
        RequestOptions.model_validate({"extra_body": {"max_tokens": 3}})
    with pytest.raises(ValueError, match="headers may not set content-length"):
        RequestOptions.model_validate({"headers": {"Content-Length": "3"}})
    with pytest.raises(ValueError, match="seed_per_request needs a seed"):
        RequestOptions.model_validate({"seed_per_request": True})
    ok = RequestOptions.model_validate({"temperature": 0.5, "seed": 3, "extra_body": {"chat_template_kwargs": {}}})
    assert ok.body_fields() == {"temperature": 0.5, "seed": 3, "chat_template_kwargs": {}}


def test_verify_holds_records_against_the_workload(tmp_path: Path) -> None:
    from kit.files.workload import WorkloadIndex
    from kit.workload.check import check_workload

    items = Workload(words_load(kind="text"), None).level(3, 1)
    data = encode_lines(items)
    (tmp_path / "workload").mkdir()
    (tmp_path / "workload" / "level-2.jsonl").write_bytes(data)
    index = WorkloadIndex(dataset="text", tokenizer="words", levels={"2": hashlib.sha256(data).hexdigest()})
    (tmp_path / "workload" / "index.json").write_text(json.dumps(index.to_json()))
    recs = tmp_path / "cells" / "a-r1" / "level-2" / "records.jsonl"
    recs.parent.mkdir(parents=True)
    good = [{"rid": f"w0-{i}", "workload_index": i, "prompt_tokens_expected": 17, "prompt_flag": None}
            for i in range(3)]
    recs.write_text("".join(json.dumps(r) + "\n" for r in good))
    note, problems = check_workload(tmp_path)
    assert problems == [] and "3 requests matched" in note
    recs.write_text(json.dumps({**good[0], "workload_index": 7}) + "\n" + json.dumps({**good[1],
                    "prompt_tokens_expected": 16}) + "\n")
    _, problems = check_workload(tmp_path)
    assert len(problems) == 2 and "names workload line 7" in problems[0] and "its workload line says 17" in problems[1]
    # a shared bundle's records as a signer made them (kit verify --integrity-only): a line nested past the parser,
    # one not JSON, one a number, a record whose line is not an object: skipped, as the summary skips them, never
    # an internal error; a level named like a path is never opened
    recs.write_text("[" * 100_000 + "]" * 100_000 + "\nnot json\n5\n" + json.dumps(good[0]) + "\n")
    note, problems = check_workload(tmp_path)
    assert problems == [] and "1 requests matched" in note, (note, problems)
    recs.write_bytes(b"\xff\xfe\n")
    assert any("not UTF-8" in p for p in check_workload(tmp_path)[1])
    bad = WorkloadIndex(dataset="text", tokenizer="words", levels={"../../x": "0" * 64, "2": index.levels["2"]})
    (tmp_path / "workload" / "index.json").write_text(json.dumps(bad.to_json()))
    problems = check_workload(tmp_path)[1]
    assert problems[0] == "workload/index.json: level '../../x' is not a number", problems
    assert len(problems) == 2 and "not UTF-8" in problems[1], problems
    (tmp_path / "workload" / "level-2.jsonl").write_bytes(data + b"\n")
    assert any("does not hash" in p for p in check_workload(tmp_path)[1])


def test_kit_run_refuses_a_changed_file_before_anything_starts(tmp_path: Path) -> None:
    from kit.manifest.workload import DatasetFile, file_problem

    f = pinned(tmp_path / "p.jsonl", b'{"prompt": "a b"}\n')
    assert file_problem(DatasetFile.model_validate(f)) is None
    (tmp_path / "p.jsonl").write_bytes(b"other")
    why = file_problem(DatasetFile.model_validate(f))
    assert why is not None and f["sha256"] in why and hashlib.sha256(b"other").hexdigest() in why
    assert "cannot read it" in (file_problem(DatasetFile(path=str(tmp_path / "gone"), sha256=f["sha256"])) or "")
