"""Probe for issue 18: what nvcc's -ftz=true (f32 denormals flushed) buys the emitted kernels.

Without it every exp2f is `ex2.approx.f32`, which ptxas wraps in a denormal fix-up (a compare and
two predicated multiplies around MUFU.EX2); with it, `ex2.approx.ftz.f32` is the MUFU.EX2 alone
(the cubin of the overlapped attention kernel shrinks by 13%). The softmax of an attention tile
is issue-bound on the CUDA cores, so the fix-up costs issue slots the tensor cores wait on.
Modes: plain (no flag), ftz (-ftz=true), fast (tl.enable_fast_math: also approximate division
and square root). Each kernel is checked against the float32 reference before timing; times are
do_bench_cudagraph medians, best of ROUNDS interleaved rounds, cuDNN SDPA in the same process.

    python benchmarks/ftz/ftz_probe.py      (on a GPU; writes $OUT/ftz-probe.json)
"""
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import tilelang
import triton.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from leantile import runtime, suite  # noqa: E402

MODES = {"plain": {}, "ftz": {"tl.device_compile_flags": ["-ftz=true"]}}
if os.environ.get("FAST"):
    MODES["fast"] = {"tl.enable_fast_math": True}
_compile, _compiled, _mode = tilelang.compile, runtime._compiled, threading.local()


def compile_with(f, *a, **kw):
    """tilelang.compile with the pass options of this thread's mode."""
    kw["pass_configs"] = {**(kw.get("pass_configs") or {}), **MODES[_mode.name]}
    return _compile(f, *a, **kw)


def compiled_in_mode(source, device):
    """runtime._compiled, cached per mode (the emitted source is the same in every mode)."""
    return _compiled(source + f"\n# mode {_mode.name}\n", device)


tilelang.compile, runtime._compiled = compile_with, compiled_in_mode


def build(job):
    g, tiles, mode = job
    _mode.name = mode
    try:
        return runtime.compile(g, tiles=tiles, tuned=False)
    except Exception as e:  # noqa: BLE001 - a probe reports every failure and goes on
        return f"{type(e).__name__}: {e}"[:300]


OVERLAP = {"block_m": 128, "block_n": 128, "stages": 1, "threads": 256, "overlap": 1}
PLAIN = {"overlap": 0}
SETS = {  # (suite case, tiles over the shipped default's, or None for the default)
    "all": [("attention_published", None), ("attention_published", OVERLAP),
            ("attention_llama3_8b_prefill_t2048", None), ("attention_gpt2_prefill_t2048", None),
            ("causal_attention_published", None), ("gqa_attention_published", None),
            ("attention_llama3_8b_decode_t2048", None), ("softmax_row_published", None),
            ("softmax_row_gpt2_vocab_m2048", None), ("rmsnorm_published", None),
            ("layernorm_linear_gelu_published", None), ("swiglu_published", None)],
    "attention": [(c, t) for c in ("attention_published", "attention_scaled_published",
                                   "attention_llama3_8b_prefill_t2048", "gqa_attention_published")
                  for t in (None, OVERLAP)]
    + [("attention_gpt2_prefill_t2048", None), ("attention_gpt2_prefill_t2048", PLAIN),
       ("causal_attention_published", None), ("causal_attention_published", PLAIN),
       ("sliding_window_attention_published", None)],
}
CASES = SETS[os.environ.get("SET", "all")]


def vendor(baselines, inputs):
    """{vendor path: ms} of the case's architecture (cuDNN SDPA, cuBLAS...), in this process."""
    if baselines is None:
        return {}
    _, paths = baselines(inputs)
    out = {}
    for name, fn in paths.items():
        try:
            fn()
            out[name] = tt.do_bench_cudagraph(fn, rep=100, return_mode="median")
        except Exception as e:  # noqa: BLE001 - a vendor path this shape has not
            out[name] = f"{type(e).__name__}"
    return out


def main():
    rounds = int(os.environ.get("ROUNDS", "2"))
    byname = {c.name: c for c in suite.CASES}
    built = {name: suite.build(byname[name]) for name, _ in CASES}
    jobs = [(i, mode) for i in range(len(CASES)) for mode in MODES]
    with ThreadPoolExecutor(int(os.environ.get("WORKERS", "8"))) as pool:
        made = list(pool.map(build, [(built[CASES[i][0]][0], CASES[i][1], mode) for i, mode in jobs]))
    made = dict(zip(jobs, made))
    rows = []
    for i, (name, tiles) in enumerate(CASES):
        g, baselines = built[name]
        row = {"case": name, "tiles": tiles, "sizes": byname[name].sizes}
        kernels = {}
        for mode in MODES:
            _mode.name = mode
            kern = made[(i, mode)]
            if isinstance(kern, str):
                row[mode] = {"error": kern}
                continue
            try:
                inputs = kern.random_inputs(seed=1)
                v = kern.verify(inputs)
                kernels[mode] = (kern, inputs)
                row[mode] = {"ok": v["ok"], "rel_err": max(v["plain_rel_err"].values()), "ms": []}
                row["plan"] = {"candidate": kern.plan.candidate, "tiles": kern.plan.tiles}
            except Exception as e:  # noqa: BLE001
                row[mode] = {"error": f"{type(e).__name__}: {e}"[:300]}
        for _ in range(rounds):
            for mode, (kern, inputs) in kernels.items():
                row[mode]["ms"].append(kern.benchmark(inputs))
        for mode in kernels:
            row[mode]["best"] = min(row[mode]["ms"])
        if kernels:
            row["vendor_ms"] = vendor(baselines, next(iter(kernels.values()))[1])
        base = row.get("plain", {}).get("best")
        line = f"{name:40s} {json.dumps(tiles) if tiles else 'default':8s}"
        for mode in MODES:
            b = row.get(mode, {}).get("best")
            line += f" {mode}={b:.4f}" if b else f" {mode}=ERR"
            if b and base:
                line += f" ({base / b:.3f}x ok={row[mode]['ok']})"
        for v, ms in row.get("vendor_ms", {}).items():
            line += f" {v}={ms:.4f}" if isinstance(ms, float) else f" {v}={ms}"
        print(line, flush=True)
        rows.append(row)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "ftz-probe.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
