"""Regenerate the hostile-manifest corpus in tests/manifests/bad/ (committed; run by hand).

Each case is a YAML text plus the substrings its error message must contain (the field and line).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
BASE = """\
manifest_version: 1
name: corpus
runtime: process
model:
  served_name: m
server:
  command: ["{python}", "-m", "kit.engine", "--port", "{port}"]
  port: 18080
arms:
  - name: a
  - name: b
    args: ["--oea-k0", "4"]
load:
  levels: [1, 4]
"""
DOCKER = """\
manifest_version: 1
name: corpus
runtime: docker
model:
  served_name: m
server:
  command: ["serve"]
  port: 30000
arms:
  - name: a
    image:
      context: images/sglang
      base: lmsysorg/sglang:v0.5.23@sha256:{d}
  - name: b
    image:
      context: images/oea
      base_arm: a
load:
  levels: [1, 4]
""".replace("{d}", "a" * 64)


def sub(old: str, new: str, base: str = BASE) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


CASES: dict[str, tuple[str, list[str]]] = {
    # wrong types
    "type-name-int": (sub("name: corpus", "name: 12"), ["name", "line 2"]),
    "type-port-string": (sub("port: 18080", 'port: "18080"'), ["server.port", "line 8"]),
    "type-port-float": (sub("port: 18080", "port: 18080.5"), ["server.port", "line 8"]),
    "type-levels-string": (sub("levels: [1, 4]", "levels: '1,4'"), ["load.levels", "line 14"]),
    "type-levels-float": (sub("levels: [1, 4]", "levels: [1.5, 4]"), ["load.levels[0]", "line 14"]),
    "type-command-string": (sub('command: ["{python}", "-m", "kit.engine", "--port", "{port}"]',
                                'command: "python -m kit.engine"'), ["server.command", "line 7"]),
    "type-arms-mapping": (sub("arms:\n  - name: a\n  - name: b\n    args: [\"--oea-k0\", \"4\"]",
                              "arms:\n  a: {}\n  b: {}"), ["arms", "line 10"]),
    "type-runtime-bool": (sub("runtime: process", "runtime: yes"), ["runtime", "line 3"]),
    "type-args-int": (sub('args: ["--oea-k0", "4"]', 'args: ["--oea-k0", 4]'), ["arms[1].args[1]", "line 12"]),
    "type-env-int": (sub("  port: 18080", "  port: 18080\n  env:\n    X: 1"), ["server.env.X", "line 10"]),
    "type-bool-ipc": (sub("  port: 18080", "  port: 18080\n  ipc_host: 'yes'"), ["server.ipc_host", "line 9"]),
    "type-repeats-string": (BASE + "design:\n  repeats: three\n", ["design.repeats", "line 16"]),
    "type-seed-float": (BASE + "  seed: 1.5\n", ["load.seed", "line 15"]),
    "type-version": (sub("manifest_version: 1", "manifest_version: 2"), ["manifest_version", "line 1"]),
    "type-model-list": (sub("model:\n  served_name: m", "model: [m]"), ["model", "line 4"]),
    "type-null-name": (sub("name: corpus", "name: null"), ["name", "line 2"]),
    # unknown keys
    "unknown-top": (BASE + "extra: 1\n", ["extra", "unknown field", "line 15"]),
    "unknown-server": (sub("  port: 18080", "  port: 18080\n  prot: 1"), ["server.prot", "line 9"]),
    "unknown-arm": (sub("  - name: a", "  - name: a\n    imag: x"), ["arms[0].imag", "line 11"]),
    "unknown-load": (BASE + "  concurrency: 3\n", ["load.concurrency", "line 15"]),
    "unknown-gates": (BASE + "gates:\n  gpu_mem: 3\n", ["gates.gpu_mem", "line 16"]),
    "unknown-typo-levels": (sub("levels: [1, 4]", "level: [1, 4]"), ["load.level", "line 14"]),
    # duplicate keys
    "dup-top": (BASE + "name: other\n", ["duplicate key", "name", "line 15"]),
    "dup-nested": (sub("  port: 18080", "  port: 18080\n  port: 18081"), ["duplicate key", "server.port", "line 9"]),
    "dup-arm": (sub("  - name: a", "  - name: a\n    name: c"), ["duplicate key", "line 11"]),
    # missing / arms
    "missing-arms": (sub("arms:\n  - name: a\n  - name: b\n    args: [\"--oea-k0\", \"4\"]\n", ""), ["arms", "required"]),
    "one-arm": (sub("  - name: b\n    args: [\"--oea-k0\", \"4\"]\n", ""), ["arms", "line 10"]),
    "zero-arms": (sub("arms:\n  - name: a\n  - name: b\n    args: [\"--oea-k0\", \"4\"]", "arms: []"), ["arms", "line 9"]),
    "dup-arm-names": (sub("  - name: b", "  - name: a"), ["unique", "arms"]),
    "bad-arm-name": (sub("  - name: a", "  - name: 'Bad Arm'"), ["arms[0].name", "line 10"]),
    "missing-name": (sub("name: corpus\n", ""), ["name", "required"]),
    "missing-server": (sub("server:\n  command: [\"{python}\", \"-m\", \"kit.engine\", \"--port\", \"{port}\"]\n  port: 18080\n", ""), ["server", "required"]),
    "missing-port": (sub("  port: 18080\n", ""), ["port", "required"]),
    "missing-runtime": (sub("runtime: process\n", ""), ["runtime", "required"]),
    "bad-runtime": (sub("runtime: process", "runtime: k8s"), ["runtime", "line 3"]),
    "empty-command": (sub('command: ["{python}", "-m", "kit.engine", "--port", "{port}"]', "command: []"), ["server.command", "line 7"]),
    # levels
    "level-zero": (sub("levels: [1, 4]", "levels: [0, 4]"), ["load.levels[0]", "line 14"]),
    "level-negative": (sub("levels: [1, 4]", "levels: [-1, 4]"), ["load.levels[0]", "line 14"]),
    "levels-unsorted": (sub("levels: [1, 4]", "levels: [4, 1]"), ["load.levels", "ascending"]),
    "levels-duplicate": (sub("levels: [1, 4]", "levels: [4, 4]"), ["load.levels", "ascending"]),
    "levels-empty": (sub("levels: [1, 4]", "levels: []"), ["load.levels", "line 14"]),
    "requests-zero": (BASE + "  requests_per_level: 0\n", ["requests_per_level", "line 15"]),
    "requests-list-length": (BASE + "  requests_per_level: [10, 20, 30]\n", ["requests_per_level", "3 entries"]),
    "requests-below-concurrency": (BASE + "  requests_per_level: [10, 2]\n", ["level 4", "only 2 requests"]),
    "repeats-zero": (BASE + "design:\n  repeats: 0\n", ["design.repeats", "line 16"]),
    "bad-order": (BASE + "design:\n  order: alternating\n", ["design.order", "line 16"]),
    # ports
    "port-zero": (sub("port: 18080", "port: 0"), ["server.port", "line 8"]),
    "port-too-big": (sub("port: 18080", "port: 70000"), ["server.port", "line 8"]),
    "port-negative": (sub("port: 18080", "port: -5"), ["server.port", "line 8"]),
    "gate-port-too-big": (BASE + "gates:\n  ports: [65536]\n", ["gates.ports[0]", "line 16"]),
    "port-repeated": (BASE + "gates:\n  ports: [18080]\n", ["port", "repeat"]),
    "bad-host": (sub("  port: 18080", "  port: 18080\n  host: localhost"), ["server.host", "not an IP"]),
    # images
    "unpinned-base": (DOCKER.replace("@sha256:" + "a" * 64, ""), ["arms[0].image.base", "not pinned", "line 13"]),
    "unpinned-latest": (DOCKER.replace("v0.5.23@sha256:" + "a" * 64, "latest"), ["not pinned", "line 13"]),
    "short-digest": (DOCKER.replace("a" * 64, "abc"), ["arms[0].image.base", "line 13"]),
    "docker-no-image": (DOCKER.replace("    image:\n      context: images/oea\n      base_arm: a\n", ""), ["needs an 'image'"]),
    "image-two-bases": (DOCKER.replace("      base_arm: a", "      base_arm: a\n      base: x@sha256:" + "b" * 64),
                        ["exactly one", "arms[1].image"]),
    "image-context-outside": (DOCKER.replace("context: images/oea", "context: ../etc"), ["context", "line 16"]),
    "image-base-arm-self": (DOCKER.replace("base_arm: a", "base_arm: b"), ["base_arm", "another arm"]),
    # host safety
    "model-path-root": (sub("  served_name: m", "  served_name: m\n  path: /"), ["model.path", "line 6", "system directory"]),
    "model-path-etc-dotdot": (sub("  served_name: m", "  served_name: m\n  path: /models/../etc"),
                              ["model.path", "line 6", "resolves to '/etc'"]),
    "model-path-docker-sock": (sub("  served_name: m", "  served_name: m\n  path: /var/run/docker.sock"),
                               ["model.path", "line 6", "Docker socket"]),
    "env-cuda-visible": (sub("  port: 18080", "  port: 18080\n  env:\n    CUDA_VISIBLE_DEVICES: '0'"),
                         ["server.env", "line 10", "hardware.gpus"]),
    "arm-env-nvidia-visible": (sub("  - name: a", "  - name: a\n    env: {NVIDIA_VISIBLE_DEVICES: all}"),
                               ["arms[0].env", "line 11", "hardware.gpus"]),
    "pass-env-kit-passphrase": (sub("  port: 18080", "  port: 18080\n  pass_env: [KIT_KEY_PASSPHRASE]"),
                                ["server.pass_env", "line 9", "kit's own variables"]),
    # YAML hostility
    "tag-python-object": (sub("name: corpus", "name: !!python/object:os.system ls"), ["python/object", "line 2"]),
    "tag-python-name": (sub("name: corpus", "name: !!python/name:os.system"), ["python/name", "line 2"]),
    "tag-custom": (sub("name: corpus", "name: !env NAME"), ["!env", "line 2"]),
    "tag-binary": (sub("name: corpus", "name: !!binary aGVsbG8="), ["binary", "line 2"]),
    "tag-set": (BASE + "x: !!set {a: null}\n", ["set", "line 15"]),
    "anchor": (sub("name: corpus", "name: &n corpus"), ["anchor", "line 2"]),
    "alias-bomb": ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                   "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
                   ["anchor", "line 1"]),
    "merge-key": (sub("  port: 18080", "  port: 18080\n  <<: {x: 1}"), ["merge", "line 9"]),
    "timestamp": (BASE + "description: 2026-11-30\n", ["date", "line 15"]),
    "nan": (BASE + "gates:\n  gpu_deadline_s: .nan\n", ["finite", "line 16"]),
    "infinity": (BASE + "gates:\n  gpu_deadline_s: .inf\n", ["finite", "line 16"]),
    "non-string-key": (BASE + "1: x\n", ["keys", "line 15"]),
    "complex-key": (BASE + "? [a, b]\n: x\n", ["keys", "line 15"]),
    "top-level-list": ("- name: a\n- name: b\n", ["top level", "mapping"]),
    "top-level-scalar": ("just a string\n", ["top level", "mapping"]),
    "syntax-error": (sub("  port: 18080", "  port: [18080"), ["not valid YAML", "line"]),
    "bad-indent": (sub("  served_name: m", "    served_name: m\n  x"), ["YAML", "line"]),
    "tab-indent": (sub("  served_name: m", "\tserved_name: m"), ["YAML", "line"]),
    "two-documents": (BASE + "---\nname: second\n", ["YAML", "line"]),
    "deep-nesting": ("a: " + "[" * 40 + "]" * 40 + "\n", ["deeper", "line 1"]),
    "comment-only": ("# nothing here\n", ["no YAML document"]),
    "empty": ("", ["empty"]),
    "whitespace": ("   \n\n  \n", ["empty"]),
}
BINARY = {
    "binary-garbage": (bytes(range(256)) * 4, ["binary", "line"]),
    "binary-latin1": ("name: caf\xe9\n".encode("latin-1"), ["UTF-8", "line 1"]),
    "binary-nul": (b"name: a\x00b\n", ["NUL", "line 1"]),
}


def main() -> None:
    out = HERE / "bad"
    out.mkdir(exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    expect: dict[str, list[str]] = {}
    for name, (text, needles) in CASES.items():
        (out / f"{name}.yaml").write_text(text)
        expect[f"{name}.yaml"] = needles
    for name, (data, needles) in BINARY.items():
        (out / f"{name}.yaml").write_bytes(data)
        expect[f"{name}.yaml"] = needles
    (HERE / "bad_expect.json").write_text(json.dumps(expect, indent=1, sort_keys=True) + "\n")
    print(f"{len(expect)} cases")


if __name__ == "__main__":
    main()
