"""Write the hostile graph corpus: `python tests/hostile/make_corpus.py` (from the repo root).

Each file in tests/hostile/graphs/ is what an attacker or a careless user could hand to any
command: `bad-*` files must be refused by `leantile validate` (exit 1, one line per problem,
naming the file), `ok-*` files are valid and must go through every command. tests/cpu/
test_hostile.py runs every command over every file and checks: no traceback, exit status 0
or 1 (never the internal-error status 2), no file written outside the output folder, and no
code executed (every payload here would create the file `hostile-marker` in the working
directory, which the test checks after every command).

The files are committed; this script documents how they were made. Add new cases here or
as hand-written files (the test picks up every file in the folder), never remove one.
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent / "graphs"
PAYLOAD = '__import__("os").system("touch hostile-marker")'
PY_PAYLOAD = 'open("hostile-marker", "w").close()'


def base_matmul() -> dict:
    return {"schema": "leantile/v1", "name": "mm", "axes": {"m": 8, "d": 16, "n": 8},
            "nodes": [{"id": 0, "op": "input", "name": "X", "axes": ["m", "d"], "dtype": "f16"},
                      {"id": 1, "op": "input", "name": "W", "axes": ["d", "n"], "dtype": "f16"},
                      {"id": 2, "op": "matmul", "a": 0, "b": 1, "axis_a": "d", "axis_b": "d", "axes": ["m", "n"]}],
            "outputs": {"out": 2}, "derivation": []}


def base_softmax() -> dict:
    """A row softmax with the online_softmax derivation a real export carries."""
    return {"schema": "leantile/v1", "name": "sm", "axes": {"r": 4, "c": 40},
            "nodes": [{"id": 0, "op": "input", "name": "X", "axes": ["r", "c"], "dtype": "f16"},
                      {"id": 1, "op": "reduce", "kind": "max", "x": 0, "axis": "c", "axes": ["r"]},
                      {"id": 2, "op": "sub", "a": 0, "b": 1, "axes": ["r", "c"]},
                      {"id": 3, "op": "exp", "x": 2, "axes": ["r", "c"]},
                      {"id": 4, "op": "reduce", "kind": "sum", "x": 3, "axis": "c", "axes": ["r"]},
                      {"id": 5, "op": "div", "a": 3, "b": 4, "axes": ["r", "c"]}],
            "outputs": {"out": 5}, "derivation": []}


def mutate(d: dict, fn) -> dict:
    d = json.loads(json.dumps(d))
    fn(d)
    return d


def setp(path: str, value):
    """A mutation that sets d[path...] = value (path: dot-separated keys / indices)."""
    def fn(d):
        *head, last = path.split(".")
        for k in head:
            d = d[int(k)] if isinstance(d, list) else d[k]
        d[int(last) if isinstance(d, list) else last] = value
    return fn


def rename_output(new):
    def fn(d):
        d["outputs"] = {new: d["outputs"].pop("out")}
    return fn


def cases() -> dict[str, bytes | dict | str]:
    mm, sm = base_matmul(), base_softmax()
    c: dict[str, bytes | dict | str] = {}
    # names that would inject code into generated modules, or paths into the file system
    c["bad-inject-input-name"] = mutate(mm, setp("nodes.0.name", f"X\n                {PAYLOAD} #"))
    c["bad-inject-output-name"] = mutate(mm, rename_output(f'out"""\n{PAYLOAD}\n"""'))
    c["bad-inject-graph-name"] = mutate(mm, setp("name", f'mm"""\n{PAYLOAD}\n"""'))
    c["bad-inject-axis-name"] = mutate(mm, lambda d: (d["axes"].update({f"m\n{PAYLOAD}": 8})))
    c["bad-inject-const-value"] = mutate(mm, lambda d: (d["nodes"].append(
        {"id": 3, "op": "const", "value": f"1\n{PAYLOAD}", "axes": []}), d["outputs"].update({"c": 3})))
    c["bad-path-graph-name-dotdot"] = mutate(mm, setp("name", "../../evil"))
    c["bad-path-graph-name-absolute"] = mutate(mm, setp("name", "/tmp/leantile-evil"))
    c["bad-name-quote"] = mutate(mm, setp("nodes.0.name", "X'"))
    c["bad-name-doublequote"] = mutate(mm, setp("nodes.1.name", 'W"'))
    c["bad-name-nul"] = mutate(mm, setp("nodes.0.name", "X\u0000"))
    c["bad-name-space"] = mutate(mm, setp("nodes.0.name", "X Y"))
    c["bad-name-unicode"] = mutate(mm, setp("nodes.0.name", "X\u00e9"))
    c["bad-name-empty"] = mutate(mm, setp("nodes.0.name", ""))
    c["bad-name-too-long"] = mutate(mm, setp("nodes.0.name", "X" * 65))
    c["bad-name-digit-first"] = mutate(mm, rename_output("1out"))
    c["bad-name-backslash"] = mutate(mm, rename_output("out\\"))
    # what the JSON Schema rejects must be rejected (no lax coercion)
    c["bad-type-size-string"] = mutate(mm, setp("axes.m", "8"))
    c["bad-type-size-bool"] = mutate(mm, setp("axes.m", True))
    c["bad-type-size-fraction"] = mutate(mm, setp("axes.m", 8.5))
    c["bad-type-id-string"] = mutate(mm, setp("nodes.2.id", "2"))
    c["bad-type-arg-bool"] = mutate(mm, setp("nodes.2.b", True))
    c["bad-type-output-string"] = mutate(mm, setp("outputs.out", "2"))
    c["bad-size-zero"] = mutate(mm, setp("axes.m", 0))
    c["bad-size-negative"] = mutate(mm, setp("axes.m", -1))
    c["bad-size-2pow31-plus-1"] = mutate(mm, setp("axes.m", 2**31 + 1))
    c["bad-size-5000-digits"] = json.dumps(base_matmul()).replace('"m": 8', '"m": ' + "9" * 5000)
    c["bad-id-5000-digits"] = json.dumps(base_matmul()).replace('"b": 1', '"b": ' + "1" * 5000)
    c["bad-size-nan"] = json.dumps(base_matmul()).replace('"m": 8', '"m": NaN')
    c["bad-size-infinity"] = json.dumps(base_matmul()).replace('"m": 8', '"m": Infinity')
    # documents that are not graphs at all
    c["bad-doc-nested-3000"] = '{"schema": "leantile/v1", "x": ' + "[" * 3000 + "]" * 3000 + "}"
    c["bad-doc-array-3000"] = "[" * 3000 + "]" * 3000
    c["bad-doc-not-utf8"] = b'{"schema": "leantile/v1", "name": "\xff\xfe\xc3"}'
    c["bad-doc-utf16"] = json.dumps(mm).encode("utf-16")
    c["bad-doc-utf8-bom"] = b"\xef\xbb\xbf" + json.dumps(mm).encode()
    c["bad-doc-empty"] = b""
    c["bad-doc-whitespace"] = b"  \n\t "
    c["bad-doc-binary"] = bytes(range(256))
    c["bad-doc-array"] = "[1, 2, 3]"
    c["bad-doc-string"] = '"leantile/v1"'
    c["bad-doc-null"] = "null"
    c["bad-doc-truncated"] = json.dumps(mm)[:100]
    c["bad-doc-duplicate-key"] = json.dumps(mm)[:-1] + ', "outputs": {"out": 0}}'
    c["bad-doc-nul-byte"] = json.dumps(mm).encode().replace(b'"mm"', b'"m\x00m"')
    c["bad-schema-missing"] = mutate(mm, lambda d: d.pop("schema"))
    c["bad-schema-other"] = mutate(mm, setp("schema", "leantile/v2"))
    c["bad-schema-huge-string"] = mutate(mm, setp("schema", "x" * 100000))
    c["bad-extra-top-field"] = mutate(mm, setp("exec", PY_PAYLOAD))
    c["bad-extra-node-field"] = mutate(mm, setp("nodes.2.code", PY_PAYLOAD))
    c["bad-op-unknown"] = mutate(mm, setp("nodes.2.op", "eval"))
    c["bad-graph-cycle"] = mutate(mm, setp("nodes.2.a", 2))
    c["bad-graph-dangling"] = mutate(mm, setp("nodes.2.b", 7))
    c["bad-graph-no-nodes"] = mutate(mm, lambda d: (d.update(nodes=[], outputs={})))
    c["bad-graph-no-outputs"] = mutate(mm, setp("outputs", {}))
    c["bad-graph-output-missing-node"] = mutate(mm, setp("outputs.out", 99))
    c["bad-graph-ids-out-of-order"] = mutate(mm, setp("nodes.1.id", 5))
    c["bad-graph-duplicate-input"] = mutate(mm, setp("nodes.1.name", "X"))
    # derivations that derive would refuse must be refused by validate too
    online = {"rule": "online_softmax", "theorem": "LeanTile.online_softmax_ratio", "at": [1, 2, 3, 4, 5],
              "params": {"axis": "c"}}
    shift = {"rule": "softmax_shift", "theorem": "LeanTile.softmax_shift_invariant", "at": [1, 2], "params": {}}
    c["bad-deriv-unknown-rule"] = mutate(sm, setp("derivation", [shift, {**online, "rule": "os_system"}]))
    c["bad-deriv-madeup-theorem"] = mutate(sm, setp("derivation", [shift, {**online, "theorem": "LeanTile.trust_me"}]))
    c["bad-deriv-wrong-sites"] = mutate(sm, setp("derivation", [shift, {**online, "at": [0, 1]}]))
    c["bad-deriv-site-missing-node"] = mutate(sm, setp("derivation", [shift, {**online, "at": [1, 2, 3, 4, 99]}]))
    c["bad-deriv-other-axis"] = mutate(sm, setp("derivation", [shift, {**online, "params": {"axis": "r"}}]))
    c["bad-deriv-bogus-param"] = mutate(sm, setp("derivation", [shift, {**online, "params": {"axis": "c", "x": 1}}]))
    c["bad-deriv-param-object"] = mutate(sm, setp("derivation", [shift, {**online, "params": {"axis": {"a": 1}}}]))
    c["bad-deriv-theorem-injection"] = mutate(sm, setp("derivation", [shift, {**online, "theorem": f"x\n{PAYLOAD}"}]))
    c["bad-deriv-duplicated"] = mutate(sm, setp("derivation", [shift, online, online]))
    c["bad-deriv-on-matmul"] = mutate(mm, setp("derivation", [online]))
    # valid graphs that used to break commands further down
    c["ok-matmul-small"] = mm
    c["ok-size-written-as-float"] = mutate(mm, setp("axes.m", 8.0))  # JSON Schema: 8.0 is an integer
    c["ok-input-named-like-internal-buffer"] = mutate(mm, lambda d: (setp("nodes.0.name", "matmul_2")(d),
                                                                    setp("nodes.1.name", "matmul_2_shared")(d)))
    c["ok-python-keyword-names"] = mutate(mm, lambda d: (setp("nodes.0.name", "lambda")(d), setp("nodes.1.name", "T")(d),
                                                        rename_output("import")(d), setp("name", "class_")(d)))
    axes = {f"a{i}": 1 for i in range(40)}
    c["ok-forty-size-one-axes"] = {
        "schema": "leantile/v1", "name": "ones", "axes": axes,
        "nodes": [{"id": 0, "op": "input", "name": "X", "axes": list(axes), "dtype": "f16"},
                  {"id": 1, "op": "exp", "x": 0, "axes": list(axes)}],
        "outputs": {"out": 1}, "derivation": []}
    c["ok-softmax-with-derivation"] = mutate(sm, setp("derivation", [shift, online]))
    c["bad-deriv-steps-swapped"] = mutate(sm, setp("derivation", [online, shift]))
    c["ok-const-output"] = mutate(mm, lambda d: (d["nodes"].append({"id": 3, "op": "const", "value": "0.5", "axes": []}),
                                                d["outputs"].update({"half": 3})))
    return c


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for name, data in cases().items():
        if isinstance(data, dict):
            data = json.dumps(data, sort_keys=True)
        if isinstance(data, str):
            data = data.encode("utf-8")
        (HERE / f"{name}.json").write_bytes(data)
    print(f"wrote {len(cases())} files to {HERE}")


if __name__ == "__main__":
    main()
