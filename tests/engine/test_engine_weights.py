"""The engine's weights cache (kit/engine/weights.py): a read-back draw is the draw, byte for byte; anything
wrong with the cache (damaged, short, foreign, unwritable) is a logged line and a fresh draw, never an error."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from engine_helpers import EngineProcess

from kit.engine import weights
from kit.engine.__main__ import build_parser, weights_cache
from kit.engine.config import ModelConfig
from kit.engine.model import MoEModel, draws
from kit.engine.weights import KEEP, MAGIC, Draw, key, load_or_draw

CFG = ModelConfig(experts=16, top_k=4, layers=2, hidden=64, expert_ffn=32, vocab=128)
# a server of 64 MiB of weights (over weights.MIN_BYTES: cached by default), still quick to draw
CACHED_SERVER = ["--experts", "64", "--top-k", "8", "--layers", "2", "--hidden", "256", "--expert-ffn", "256",
                 "--vocab", "256"]


def cached(cache: Path, cfg: ModelConfig = CFG) -> tuple[dict[str, np.ndarray], str]:
    return load_or_draw(cfg.seed, draws(cfg), cache, min_bytes=0)


def only_file(cache: Path) -> Path:
    files = list(cache.glob("*.bin"))
    assert len(files) == 1, files
    return files[0]


def test_the_draw_is_numpys_default_rng_stream_in_order() -> None:
    """Checked against numpy itself: one default_rng(seed), standard normals in float32, each array scaled."""
    rng = np.random.default_rng(CFG.seed)
    expected = {}
    for d in draws(CFG):
        expected[d.name] = rng.standard_normal(size=d.shape, dtype=np.float32) * np.float32(d.std)
    got, how = load_or_draw(CFG.seed, draws(CFG), None)
    assert how == "drawn"
    for name, a in expected.items():
        assert got[name].dtype == np.float32 and np.array_equal(got[name], a), name


def test_read_back_is_byte_identical_and_both_arms_share_one_file(tmp_path: Path) -> None:
    fresh, _ = load_or_draw(CFG.seed, draws(CFG), None)
    _, how = cached(tmp_path)
    assert how == f"drawn and cached in {only_file(tmp_path)}"
    arrays, how = load_or_draw(CFG.seed, draws(dataclasses.replace(CFG, oea_k0=2)), tmp_path, min_bytes=0)
    assert how == f"read from {only_file(tmp_path)}"  # the OEA arm reads the baseline's draw
    for d in draws(CFG):
        a = arrays[d.name]
        assert a.dtype == np.float32 and a.flags.c_contiguous and a.shape == d.shape
        assert a.tobytes() == fresh[d.name].tobytes(), d.name
        # mapped from the file (read-only, shared by every engine through the page cache), at an aligned address
        assert not a.flags.writeable and a.ctypes.data % weights.ALIGN == 0, d.name
    assert fresh["w1"].flags.writeable  # a draw is ordinary memory


@pytest.mark.parametrize("why", ["group-writable", "network filesystem"])
def test_a_file_that_could_change_under_the_engine_is_read_not_mapped(tmp_path: Path, why: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Mapped pages are read again after the sha256 check: a file another user may write, or one on a filesystem
    where another node may remove it (nfs: SIGBUS), is copied into memory instead; the same bytes either way."""
    fresh, _ = load_or_draw(CFG.seed, draws(CFG), None)
    cached(tmp_path)
    path = only_file(tmp_path)
    if why == "group-writable":
        path.chmod(0o664)
    else:
        assert weights._filesystem(path) in weights.LOCAL_FILESYSTEMS  # where this test runs: mapped otherwise
        monkeypatch.setattr(weights, "_filesystem", lambda p: "nfs4")
    arrays, how = cached(tmp_path)
    assert how == f"read from {path}"
    for d in draws(CFG):
        a = arrays[d.name]
        assert a.tobytes() == fresh[d.name].tobytes() and a.flags.writeable, d.name  # a copy of its own


def test_the_filesystem_is_the_longest_mount_point_above_the_path() -> None:
    assert weights._filesystem(Path("/proc/self/status")) == "proc"
    assert weights._filesystem(Path("/")) is not None


def test_a_file_whose_values_are_not_aligned_is_read_into_aligned_memory(tmp_path: Path) -> None:
    """Format 1 put the values right after the header line; such a file (under the key of today's format) is still
    the draw, copied into aligned memory rather than mapped at an odd address."""
    fresh, _ = load_or_draw(CFG.seed, draws(CFG), None)
    cached(tmp_path)
    path = only_file(tmp_path)
    data = path.read_bytes()
    end = data.index(b"\n", len(MAGIC)) + 1
    unpadded = MAGIC + data[len(MAGIC):end].rstrip(b" \n") + b"\n"
    assert len(unpadded) % weights.ALIGN  # the header as format 1 wrote it leaves the values unaligned
    path.write_bytes(unpadded + data[end:])
    arrays, how = cached(tmp_path)
    assert how == f"read from {path}"
    for d in draws(CFG):
        a = arrays[d.name]
        assert a.tobytes() == fresh[d.name].tobytes() and a.flags.aligned and a.flags.writeable, d.name  # a copy


def test_a_draw_under_min_bytes_is_not_cached(tmp_path: Path) -> None:
    m = MoEModel(CFG, tmp_path)  # 0.2 MiB: drawn faster than hashed
    assert m.weights_source.startswith("drawn in ") and not any(tmp_path.iterdir())
    assert np.array_equal(m.w1, MoEModel(CFG).w1)


def test_a_model_built_from_the_cache_generates_what_a_drawn_one_does(tmp_path: Path) -> None:
    cfg = dataclasses.replace(CFG, experts=64, top_k=8)
    arrays, _ = cached(tmp_path, cfg)
    arrays, how = cached(tmp_path, cfg)
    assert how.startswith("read from")
    drawn = MoEModel(cfg)
    m = MoEModel(cfg)
    for name in ("embedding", "mixer", "router", "router_bias", "w1", "w2"):
        setattr(m, name, arrays[name])
    prompts = [[1, 2, 3], [9, 8, 7, 6]]
    a, b = drawn.prefill(prompts), m.prefill(prompts)
    for _ in range(8):
        assert np.array_equal(a.next_tokens, b.next_tokens)
        a, b = drawn.decode(a.next_tokens, a.state), m.decode(b.next_tokens, b.state)


def _flip_a_value_byte(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[-5] ^= 0x40
    p.write_bytes(bytes(data))


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-4096])


def _append(p: Path) -> None:
    p.write_bytes(p.read_bytes() + b"\0\0\0\0")


def _no_header(p: Path) -> None:
    p.write_bytes(MAGIC + b"x" * (70 << 10))


def _not_ours(p: Path) -> None:
    p.write_bytes(b"\x93NUMPY" + b"\0" * 100)


def _junk_header(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(MAGIC + b"[1, 2\n" + data[data.index(b"\n", len(MAGIC)) + 1:])


@pytest.mark.parametrize(("damage", "why"), [
    (_flip_a_value_byte, "sha256 differs"), (_truncate, "bytes of values"), (_append, "trailing bytes"),
    (_no_header, "no header line"), (_not_ours, "not a weights file"), (_junk_header, "Expecting"),
])
def test_a_damaged_file_is_drawn_again_and_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                    damage: object, why: str) -> None:
    good, _ = cached(tmp_path)
    p = only_file(tmp_path)
    damage(p)  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, "kit.engine"):
        arrays, how = cached(tmp_path)
    assert how.startswith("drawn and cached in "), how
    assert f"ignored {p}" in caplog.text and why in caplog.text, caplog.text
    assert all(np.array_equal(arrays[k], good[k]) for k in good)
    _, how = cached(tmp_path)
    assert how.startswith("read from")  # rewritten whole


def test_a_file_written_for_other_weights_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cached(tmp_path, dataclasses.replace(CFG, seed=1))
    other = only_file(tmp_path)
    mine, _ = cached(tmp_path)
    other.replace(only_file_but(tmp_path, other))  # seed 1's file under seed 0's name
    with caplog.at_level(logging.WARNING, "kit.engine"):
        arrays, how = cached(tmp_path)
    assert how.startswith("drawn and cached") and "written for other weights" in caplog.text
    assert all(np.array_equal(arrays[k], mine[k]) for k in mine)


def only_file_but(cache: Path, other: Path) -> Path:
    files = [p for p in cache.glob("*.bin") if p != other]
    assert len(files) == 1
    return files[0]


def test_an_unwritable_cache_draws_and_says_why(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    arrays, how = cached(blocker / "cache")
    assert how.startswith("drawn (not cached: ") and arrays["w1"].shape == draws(CFG)[5].shape
    assert not list(tmp_path.glob("**/*.tmp"))


def test_at_most_keep_files_the_most_recently_used_stay(tmp_path: Path) -> None:
    for seed in range(KEEP + 3):
        cached(tmp_path, dataclasses.replace(CFG, seed=seed))
    assert len(list(tmp_path.glob("*.bin"))) == KEEP
    _, how = cached(tmp_path, dataclasses.replace(CFG, seed=KEEP + 2))
    assert how.startswith("read from")
    _, how = cached(tmp_path, dataclasses.replace(CFG, seed=0))
    assert how.startswith("drawn and cached")  # evicted
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_change_of_shape_or_scale_names_another_file(tmp_path: Path) -> None:
    base = draws(CFG)
    load_or_draw(0, base, tmp_path, min_bytes=0)
    scaled = [dataclasses.replace(d, std=d.std * 2) if d.name == "w2" else d for d in base]
    _, how = load_or_draw(0, scaled, tmp_path, min_bytes=0)
    assert how.startswith("drawn and cached")
    _, how = load_or_draw(0, [*base, Draw("extra", (3,), 1.0)], tmp_path, min_bytes=0)
    assert how.startswith("drawn and cached") and len(list(tmp_path.glob("*.bin"))) == 3


def test_the_command_line_picks_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert weights_cache(None) == tmp_path / "kit" / "engine-weights"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert weights_cache(None) == tmp_path / "home" / ".cache" / "kit" / "engine-weights"
    assert weights_cache("none") is None and weights_cache("/x") == Path("/x")
    args = build_parser().parse_args(["--port", "0", "--weights-cache", "none"])
    assert args.weights_cache == "none"


def test_a_second_server_start_reads_the_weights_back_and_answers_alike(tmp_path: Path) -> None:
    """The real server, started twice on one cache: the second reads the first's draw, and greedy generation of
    the same prompt gives the same tokens."""
    cache = tmp_path / "cache"
    answers, logs = [], []
    for i in range(2):
        eng = EngineProcess([*CACHED_SERVER, "--weights-cache", str(cache)], tmp_path / f"e{i}.log")
        try:
            status, body = eng.post_json("/v1/completions", {"prompt": "one two three", "max_tokens": 12})
            assert status == 200
            answers.append(body["choices"][0]["text"])
        finally:
            eng.stop()
        logs.append((tmp_path / f"e{i}.log").read_text())
    f = only_file(cache)
    assert f"drawn and cached in {f}" in logs[0] and f"read from {f}" in logs[1], logs
    assert answers[0] == answers[1] and answers[0].count(" w") == 12


def test_eviction_touches_only_the_caches_own_files(tmp_path: Path) -> None:
    """--weights-cache may name a directory holding other files: only <sha256>.bin draws and the temporary files of
    writers killed over an hour ago are removed; a dangling link named like a draw does not stop the eviction."""
    theirs = [tmp_path / n for n in ("model.bin", "tokenizer.bin", f"{'0' * 63}.bin", ".x.tmp")]
    for p in theirs:
        p.write_text("precious")
    (tmp_path / f"{'f' * 64}.bin").symlink_to(tmp_path / "nowhere")
    stale, fresh = tmp_path / f".{'a' * 16}.k1lled_.tmp", tmp_path / f".{'b' * 16}.writing.tmp"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    for seed in range(KEEP + 2):
        cached(tmp_path, dataclasses.replace(CFG, seed=seed))
    assert all(p.read_text() == "precious" for p in theirs)
    assert len([p for p in tmp_path.glob("*.bin") if len(p.stem) == 64 and p.stem != "0" * 63]) == KEEP
    assert not stale.exists() and fresh.exists()


def test_a_cache_path_that_cannot_be_looked_at_draws(tmp_path: Path) -> None:
    """A cache path whose very lookup fails is never an error: a name too long for the file system (the lookup
    raises, as it does for a directory the user may not enter: EACCES), or a directory where the file should be."""
    arrays, how = cached(tmp_path / ("x" * 300))
    assert arrays["w1"].shape == draws(CFG)[5].shape and how.startswith("drawn (not cached: "), how
    assert "File name too long" in how
    (tmp_path / f"{key(CFG.seed, draws(CFG))}.bin").mkdir()
    arrays, how = cached(tmp_path)
    assert arrays["w1"].shape == draws(CFG)[5].shape and how.startswith("drawn (not cached: "), how


def test_a_deep_header_is_a_damaged_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cached(tmp_path)
    only_file(tmp_path).write_bytes(MAGIC + b"[" * 60000 + b"\n")
    with caplog.at_level(logging.WARNING, "kit.engine"):
        _, how = cached(tmp_path)
    assert how.startswith("drawn and cached") and "ignored" in caplog.text


def test_a_cached_file_is_readable_by_other_users(tmp_path: Path) -> None:
    cached(tmp_path)
    assert only_file(tmp_path).stat().st_mode & 0o777 == 0o644


def test_a_cache_it_may_write_but_not_list_keeps_its_draw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory of mode -wx (root is not held by its mode, so listing is made to fail as EACCES would): the draw
    is written and used, and eviction, which must list the directory, is skipped rather than an error."""
    real = Path.iterdir

    def unlistable(self: Path) -> Any:
        if self == tmp_path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", unlistable)
    arrays, how = cached(tmp_path)
    assert how.startswith("drawn and cached in ") and arrays["w1"].shape == draws(CFG)[5].shape, how
    monkeypatch.undo()
    assert cached(tmp_path)[1] == f"read from {only_file(tmp_path)}"
