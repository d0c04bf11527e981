"""`leantile bench --suite quick|rest|full [--shard i/n]`: shapes from public model configurations,
every built-in and example architecture, f16 and bf16, timed in one process against torch
eager, torch.compile and the vendor path (leantile.bench.run_one), with per-case ratios,
geomeans, the plan chosen and a chart.

Where the sizes come from (the models' published configurations):
  LLaMA-3 8B   hidden 4096, MLP 14336, 32 heads (8 KV heads), d_h 128, vocab 128256
  LLaMA-3 70B  hidden 8192, MLP 28672, 64 heads (8 KV heads), d_h 128
  Mistral 7B   hidden 4096, MLP 14336, 32 heads (8 KV heads), d_h 128, sliding window 4096
  GPT-2 small  hidden 768, MLP 3072, 12 heads, d_h 64, vocab 50257
  Gemma 2 9B   hidden 3584, MLP 14336, 16 heads (8 KV heads), d_h 256, vocab 256000
Tokens m in {1, 16, 128, 2048, 8192}; attention lengths {512, 2048, 8192, 32768}; decode is
t_q = 1 against t_kv up to 32768. Attention graphs have one head axis `h` that Q, K and V share
(a batch axis): a GQA model is measured with its K/V heads expanded to the query heads. A QKV
projection is one GEMM of width (heads + 2 KV heads) * d_h. Cases tagged `published` are the
built-ins' default sizes, where the shipped tuned entries are.

Selections: `quick` (the cases tagged "quick": every architecture, both dtypes, decode,
skinny, large and the shapes issue's named cases), `rest` (all others), `full` (all); then
`--shard i/n` keeps every n-th case from the i-th (round robin) and `--limit N` the first N.

Time: a run compiles every kernel (TileLang, 3-10 s each; in a process pool of the machine's
cores, started before the GPU loop, so the loop finds them in TileLang's disk cache) and each
case's torch.compile (two modes), checks, and times two interleaved rounds of 5-7 contenders.
Measured on a fresh H200 (2026-11-25): `quick` took 355 s, about 13 s a row (each run's JSON
under benchmarks/suite/results/ records its rows and wall_s). So `quick` fits one 10-minute call
with room; `--time-budget 540` stops starting cases after 540 s, and the JSON and table are
rewritten after every case (a kill still leaves the cases done). The other cases (`rest`, heavier on average: 8k and 32k prefill,
8192-token GEMMs) are about 15 minutes: `--suite rest --shard i/3` for i in 1..3 (or
`--suite full --shard i/4`), each one call.
"""
from __future__ import annotations

import hashlib

import json
import math
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from . import architectures, ir
from .architectures import variants
from .precompile import precompile_pool

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "architectures"
EXAMPLE_NAMES = ("attention_scaled", "geglu", "softmax_row")
DTYPE_BYTES = ir.DTYPE_BYTES
MEMORY_LIMIT = 40e9  # a case whose estimated footprint (inputs, reference, eager) exceeds this is skipped
SELECTIONS = ("quick", "rest", "full", "attention-variants")  # the last: architectures.variants' own cases
BELOW = 0.8  # the summary counts rows slower than this fraction of torch.compile

MODELS = {  # the published configurations (see the module docstring)
    "llama3_8b": {"hidden": 4096, "mlp": 14336, "heads": 32, "kv_heads": 8, "d_h": 128, "vocab": 128256},
    "llama3_70b": {"hidden": 8192, "mlp": 28672, "heads": 64, "kv_heads": 8, "d_h": 128, "vocab": 128256},
    "mistral_7b": {"hidden": 4096, "mlp": 14336, "heads": 32, "kv_heads": 8, "d_h": 128, "window": 4096},
    "gpt2": {"hidden": 768, "mlp": 3072, "heads": 12, "kv_heads": 12, "d_h": 64, "vocab": 50257},
    "gemma2_9b": {"hidden": 3584, "mlp": 14336, "heads": 16, "kv_heads": 8, "d_h": 256, "vocab": 256000},
}


@dataclass(frozen=True)
class Case:
    name: str
    arch: str  # a built-in (architectures.NAMES) or an example (EXAMPLE_NAMES)
    sizes: dict
    dtype: str  # "f16" or "bf16"
    model: str  # a key of MODELS, "issue" (the shapes issue's own figure) or "published" (default sizes)
    tags: tuple = field(default=())

    @property
    def source(self) -> str:
        """What `leantile` takes as SOURCE for this case's architecture."""
        if self.arch in variants.NAMES:
            return variants.source(self.arch)
        return self.arch if self.arch in architectures.NAMES else f"{EXAMPLES / self.arch}.py:build"


def _defaults(arch: str) -> dict:
    """The architecture's DEFAULT_SIZES (an example's read from its file; {} where it is missing)."""
    if arch in architectures.NAMES:
        return dict(architectures.module(arch).DEFAULT_SIZES)
    import ast

    p = (variants.DIR if arch in variants.NAMES else EXAMPLES) / f"{arch}.py"
    if p.is_file():
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DEFAULT_SIZES" for t in node.targets):
                return dict(ast.literal_eval(node.value))
    return {}


def _qkv(m: dict) -> int:
    return (m["heads"] + 2 * m["kv_heads"]) * m["d_h"]


def _cases() -> list[Case]:
    out: list[Case] = []

    def add(name, arch, sizes, model, *tags, dtype="f16"):
        sizes = {**_defaults(arch), **sizes}
        rows = sizes.get("m", sizes.get("rows"))
        tags += (("decode",) if sizes.get("t_q") == 1 or rows == 1 else ()) + (("skinny",) if rows and rows <= 16 else ())
        out.append(Case(name + ("_bf16" if dtype == "bf16" else ""), arch, sizes, dtype, model, tags))

    L8, L70, MI, G2 = (MODELS[k] for k in ("llama3_8b", "llama3_70b", "mistral_7b", "gpt2"))
    # -- GEMMs: the projections of each model (X[m, d] W[d, n])
    gemms = [("llama3_8b", "qkv", L8["hidden"], _qkv(L8)), ("llama3_8b", "o", L8["hidden"], L8["hidden"]),
             ("llama3_8b", "up", L8["hidden"], L8["mlp"]), ("llama3_8b", "down", L8["mlp"], L8["hidden"]),
             ("llama3_70b", "qkv", L70["hidden"], _qkv(L70)), ("llama3_70b", "o", L70["hidden"], L70["hidden"]),
             ("llama3_70b", "up", L70["hidden"], L70["mlp"]), ("llama3_70b", "down", L70["mlp"], L70["hidden"]),
             ("gpt2", "c_attn", G2["hidden"], _qkv(G2)), ("gpt2", "c_proj", G2["mlp"], G2["hidden"])]
    at = {("llama3_8b", "qkv"): (1, 2048), ("llama3_8b", "o"): (128,), ("llama3_8b", "up"): (1, 16),
          ("llama3_8b", "down"): (16, 8192), ("llama3_70b", "qkv"): (1,), ("llama3_70b", "o"): (8192,),
          ("llama3_70b", "up"): (16,), ("llama3_70b", "down"): (2048,), ("gpt2", "c_attn"): (128,),
          ("gpt2", "c_proj"): (2048,)}
    for model, proj, d, n in gemms:
        for m in at[(model, proj)]:
            big = ("large",) if 2 * m * d * n >= 5e11 else ()
            add(f"matmul_{model}_{proj}_m{m}", "matmul", {"m": m, "d": d, "n": n}, model, *big)
    add("matmul_k524288", "matmul", {"m": 256, "d": 524288, "n": 256}, "issue", "large", "long_k")
    add("matmul_llama3_8b_up_m1", "matmul", {"m": 1, "d": 4096, "n": 14336}, "llama3_8b", dtype="bf16")
    add("matmul_llama3_8b_qkv_m2048", "matmul", {"m": 2048, "d": 4096, "n": 6144}, "llama3_8b", dtype="bf16")
    add("matmul_mistral_7b_up_m16", "matmul", {"m": 16, "d": MI["hidden"], "n": MI["mlp"]}, "mistral_7b",
        dtype="bf16")
    add("matmul_llama3_70b_o_m8192", "matmul", {"m": 8192, "d": 8192, "n": 8192}, "llama3_70b", "large",
        dtype="bf16")
    # -- gated MLPs (X[m, d] W_gate[d, n] W_up[d, n]): SwiGLU is LLaMA's and Mistral's; GeGLU at the same widths
    for m in (1, 16, 128, 2048, 8192):
        add(f"swiglu_llama3_8b_m{m}", "swiglu", {"m": m, "d": L8["hidden"], "n": L8["mlp"]}, "llama3_8b",
            *(("large",) if m >= 8192 else ()))
    add("swiglu_llama3_70b_m16", "swiglu", {"m": 16, "d": L70["hidden"], "n": L70["mlp"]}, "llama3_70b")
    for dt in ("f16", "bf16"):
        add("swiglu_llama3_70b_m2048", "swiglu", {"m": 2048, "d": L70["hidden"], "n": L70["mlp"]}, "llama3_70b",
            "large", dtype=dt)
    add("swiglu_llama3_8b_m16", "swiglu", {"m": 16, "d": 4096, "n": 14336}, "llama3_8b", dtype="bf16")
    add("swiglu_mistral_7b_m128", "swiglu", {"m": 128, "d": MI["hidden"], "n": MI["mlp"]}, "mistral_7b", dtype="bf16")
    for m, dt in ((16, "f16"), (2048, "f16"), (2048, "bf16")):
        add(f"geglu_llama3_8b_m{m}", "geglu", {"m": m, "d": L8["hidden"], "n": L8["mlp"]}, "llama3_8b", dtype=dt)
    # -- RMSNorm into the QKV projection; RMSNorm into both MLP GEMMs
    for m in (1, 16, 128, 2048, 8192):
        add(f"rmsnorm_llama3_8b_qkv_m{m}", "rmsnorm", {"m": m, "d": L8["hidden"], "n": _qkv(L8)}, "llama3_8b",
            *(("large",) if m >= 8192 else ()))
    add("rmsnorm_llama3_70b_qkv_m2048", "rmsnorm", {"m": 2048, "d": L70["hidden"], "n": _qkv(L70)}, "llama3_70b")
    for m in (16, 2048):
        add(f"rmsnorm_llama3_8b_qkv_m{m}", "rmsnorm", {"m": m, "d": L8["hidden"], "n": _qkv(L8)}, "llama3_8b",
            dtype="bf16")
    for m in (16, 128, 2048):
        add(f"rmsnorm_mlp_llama3_8b_m{m}", "rmsnorm_mlp", {"m": m, "d": L8["hidden"], "n": L8["mlp"]}, "llama3_8b")
    add("rmsnorm_mlp_llama3_70b_m128", "rmsnorm_mlp", {"m": 128, "d": L70["hidden"], "n": L70["mlp"]}, "llama3_70b")
    add("rmsnorm_mlp_llama3_8b_m2048", "rmsnorm_mlp", {"m": 2048, "d": 4096, "n": 14336}, "llama3_8b", dtype="bf16")
    # -- LayerNorm -> Linear + bias -> GELU (tanh): GPT-2's MLP up-projection; the issue's 4096 x 4096 x 16384
    for m in (1, 128, 2048, 8192):
        add(f"layernorm_linear_gelu_gpt2_m{m}", "layernorm_linear_gelu", {"m": m, "d": G2["hidden"], "n": G2["mlp"]},
            "gpt2")
    add("layernorm_linear_gelu_gpt2_m2048", "layernorm_linear_gelu", {"m": 2048, "d": 768, "n": 3072}, "gpt2",
        dtype="bf16")
    for dt in ("f16", "bf16"):
        add("layernorm_linear_gelu_4096x4096x16384", "layernorm_linear_gelu", {"m": 4096, "d": 4096, "n": 16384},
            "issue", "large", dtype=dt)
    # -- attention (h, t_q, t_kv, d_h): prefill t_q = t_kv, decode t_q = 1
    def attn(arch, model, t_q, t_kv, *tags, h=None, dtype="f16", note=""):
        cfg = MODELS[model]
        kind = "decode" if t_q == 1 else "prefill"
        add(f"{arch}_{model}_{kind}_t{t_kv}{note}", arch,
            {"h": h or cfg["heads"], "t_q": t_q, "t_kv": t_kv, "d_h": cfg["d_h"]}, model, *tags, dtype=dtype)

    for t in (512, 2048, 8192):
        attn("attention", "llama3_8b", t, t, *(("large",) if t >= 8192 else ()))
    # 32 heads at 32k would need ~410 GB for eager's scores: 2 heads (eager ~26 GB); 32 heads stays as a skip
    attn("attention", "llama3_8b", 32768, 32768, "large", h=2, note="_h2")
    attn("attention", "llama3_8b", 32768, 32768, "large")
    attn("attention", "llama3_70b", 2048, 2048)
    for t in (512, 2048):
        attn("attention", "gpt2", t, t)
    for t in (2048, 8192, 32768):
        attn("attention", "llama3_8b", 1, t)
    for t in (8192, 32768):
        attn("attention", "llama3_70b", 1, t)
    attn("attention", "mistral_7b", 1, MI["window"], note="_window")
    attn("attention", "gpt2", 1, 2048)
    attn("attention", "llama3_8b", 1, 8192, dtype="bf16")
    attn("attention", "llama3_8b", 1, 32768, dtype="bf16")
    attn("attention", "llama3_8b", 2048, 2048, dtype="bf16")
    attn("attention", "gpt2", 512, 512, dtype="bf16")
    # causal (bottom-right aligned): prefill, chunked prefill against a longer cache (t_q < t_kv), bf16
    for t in (512, 2048):
        attn("causal_attention", "llama3_8b", t, t)
    attn("causal_attention", "llama3_8b", 8192, 8192, "large")
    attn("causal_attention", "llama3_8b", 512, 4096, note="_chunk512")
    attn("causal_attention", "gpt2", 1024, 1024, dtype="bf16")
    # heads of 256 (Gemma; issue 51: a flash plan for heads past 128, FLASH_LARGE_HEAD_TILES)
    attn("causal_attention", "gemma2_9b", 2048, 2048, dtype="bf16")
    attn("causal_attention", "gemma2_9b", 4096, 4096)
    attn("attention", "gemma2_9b", 2048, 2048)
    # sliding window of 1024 keys (the built-in's constant; Mistral 7B's own is 4096)
    attn("sliding_window_attention", "llama3_8b", 4096, 4096)
    attn("sliding_window_attention", "mistral_7b", 16384, 16384, "large")
    attn("sliding_window_attention", "mistral_7b", 8192, 8192, dtype="bf16")
    # grouped-query (h_kv KV heads, g = heads / h_kv query heads each): prefill and decode, where a
    # group's heads fill the GEMM rows one query alone leaves empty
    def gqa(model, t_q, t_kv, *tags, dtype="f16"):
        cfg = MODELS[model]
        kind = "decode" if t_q == 1 else "prefill"
        add(f"gqa_attention_{model}_{kind}_t{t_kv}", "gqa_attention",
            {"h_kv": cfg["kv_heads"], "g": cfg["heads"] // cfg["kv_heads"], "t_q": t_q, "t_kv": t_kv,
             "d_h": cfg["d_h"]}, model, *tags, dtype=dtype)
    gqa("llama3_8b", 2048, 2048)
    gqa("llama3_8b", 1, 8192)
    gqa("llama3_70b", 1, 32768, dtype="bf16")
    attn("attention_scaled", "llama3_8b", 2048, 2048)
    attn("attention_scaled", "llama3_8b", 8192, 8192, "large")
    attn("attention_scaled", "gpt2", 512, 512, dtype="bf16")
    attn("attention_scaled", "mistral_7b", 1, MI["window"], dtype="bf16", note="_window")
    attn("attention_scaled", "llama3_70b", 1, 32768)
    # -- a softmax over the vocabulary (logits of m tokens)
    for m, dt in ((16, "f16"), (2048, "f16"), (2048, "bf16")):
        add(f"softmax_row_llama3_vocab_m{m}", "softmax_row", {"rows": m, "cols": L8["vocab"]}, "llama3_8b", dtype=dt)
    add("softmax_row_gpt2_vocab_m2048", "softmax_row", {"rows": 2048, "cols": G2["vocab"]}, "gpt2")
    # -- every architecture at its default sizes: where the shipped tuned entries are (both plans reported)
    for arch in (*architectures.NAMES, *EXAMPLE_NAMES):
        add(f"{arch}_published", arch, {}, "published", "published")
    add("matmul_published", "matmul", {}, "published", "published", dtype="bf16")
    return out


QUICK = (  # every architecture, f16 and bf16, decode, skinny, large, the named shapes
    "attention_llama3_8b_decode_t8192", "attention_llama3_8b_decode_t32768_bf16", "attention_gpt2_prefill_t512",
    "attention_llama3_8b_prefill_t2048_bf16", "attention_published", "attention_scaled_llama3_8b_prefill_t2048",
    "attention_scaled_mistral_7b_decode_t4096_window_bf16", "matmul_llama3_8b_up_m1", "matmul_llama3_8b_up_m16",
    "matmul_k524288", "matmul_llama3_70b_o_m8192_bf16", "matmul_published", "swiglu_llama3_8b_m16",
    "swiglu_llama3_70b_m2048_bf16", "geglu_llama3_8b_m2048", "rmsnorm_llama3_8b_qkv_m16",
    "rmsnorm_llama3_8b_qkv_m2048_bf16", "rmsnorm_mlp_llama3_8b_m128", "rmsnorm_mlp_llama3_8b_m2048_bf16",
    "layernorm_linear_gelu_4096x4096x16384", "layernorm_linear_gelu_gpt2_m1", "layernorm_linear_gelu_gpt2_m2048_bf16",
    "softmax_row_llama3_vocab_m16", "softmax_row_llama3_vocab_m2048_bf16", "rmsnorm_published",
    "causal_attention_llama3_8b_prefill_t2048", "causal_attention_published", "sliding_window_attention_published",
    "gqa_attention_published", "gqa_attention_llama3_8b_decode_t8192",
)
CASES: list[Case] = [Case(c.name, c.arch, c.sizes, c.dtype, c.model, c.tags + (("quick",) if c.name in QUICK else ()))
                     for c in _cases()]
VARIANT_CASES: list[Case] = [Case(*c, tags=("variants",)) for c in variants.CASES]  # --suite attention-variants


# ------------------------------------------------------------------------ graphs
def with_dtype(g: ir.Graph, dtype: str) -> ir.Graph:
    """g with every f16 (inputs and casts) in `dtype`, validated again through ir.parse. The name
    stays: tuned entries are keyed by (name, shape, dtype), so another dtype misses them. A
    derivation the graph carries is dropped (it was checked for the f16 graph)."""
    data = g.model_dump(mode="json", by_alias=True)
    for n in data["nodes"]:
        if n["op"] in ("input", "cast") and n.get("dtype") == "f16":
            n["dtype"] = dtype
    data["derivation"] = []
    return ir.parse(data)


def build(case: Case):
    """(graph, baselines): the case's graph at its sizes and dtype, and the function of the inputs
    giving (eager, {vendor: callable}) of its architecture module (None: the graph's reference)."""
    from .bench import _architecture_module
    from .sources import load_source

    if case.arch not in (*architectures.NAMES, *EXAMPLE_NAMES, *variants.NAMES):
        raise ir.GraphError([f"suite case {case.name}: unknown architecture {case.arch!r}"])
    g = load_source(case.source, case.sizes)
    mod = _architecture_module(g, case.source)  # the module that builds exactly this f16 graph
    if case.dtype != "f16":
        g = with_dtype(g, case.dtype)
    return g, getattr(mod, "baselines", None)


def footprint(g: ir.Graph) -> int:
    """Estimated peak bytes of a case: the inputs (and their float32 copies for the reference)
    and three float32 tensors the size of the largest intermediate (the unfused reference and
    torch eager materialise it: attention's scores)."""
    inputs = sum(math.prod(g.shape(n.id)) * DTYPE_BYTES[n.dtype] for n in g.inputs())
    largest = max((math.prod(g.shape(n.id)) for n in g.nodes if not isinstance(n, ir.Input)), default=0)
    return 3 * inputs + 12 * largest


# ------------------------------------------------------------------------ selection
def parse_shard(shard: str | None) -> tuple[int, int] | None:
    if shard is None:
        return None
    i, sep, n = str(shard).partition("/")
    if not (sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise ir.GraphError([f"--shard {shard!r:.40}: expected i/n with 1 <= i <= n, e.g. 1/4"])
    return int(i), int(n)


def select(cases=None, shard: str | None = None, limit: int | None = None, tags=None, suite: str = "full") -> list[Case]:
    """The cases of `suite` (quick: tagged quick; rest: the others; full: all; attention-variants:
    leantile.architectures.variants' cases, in no other selection) having any of
    `tags` (a tag, or a case's own name), then the i-th of every n (`shard` "i/n", round robin, 1-based), then the first `limit`."""
    if suite not in SELECTIONS:
        raise ir.GraphError([f"--suite {suite!r:.40}: expected one of {', '.join(SELECTIONS)}"])
    out = list((VARIANT_CASES if suite == "attention-variants" else CASES) if cases is None else cases)
    if suite in ("quick", "rest"):
        out = [c for c in out if ("quick" in c.tags) == (suite == "quick")]
    if tags:
        out = [c for c in out if set(tags) & {c.name, *c.tags}]
    sh = parse_shard(shard)
    if sh is not None:
        out = out[sh[0] - 1::sh[1]]
    if limit is not None:
        if limit < 0:
            raise ir.GraphError([f"--limit {limit}: expected a number >= 0"])
        out = out[:limit]
    return out


# the longest selection name spelled out: it names the result files, and a file name may have
# at most 255 bytes (a dozen case names as tags passed that)
MAX_SELECTION_NAME = 96


def selection_name(suite: str, shard: str | None = None, limit: int | None = None, tags=None) -> str:
    """The selection's part of the result files' names: the suite, shard, tags and limit, or
    where those run long, the first tags, how many more, and a digest of all of them."""
    sh = parse_shard(shard)
    tags = sorted(tags or [])
    head = [suite, *([f"{sh[0]}of{sh[1]}"] if sh else [])]
    tail = [f"first{limit}"] if limit is not None else []
    name = "-".join([*head, *tags, *tail])
    if len(name) <= MAX_SELECTION_NAME:
        return name
    digest = hashlib.sha256("\0".join(tags).encode()).hexdigest()[:8]
    kept = []
    for t in tags:
        if len("-".join([*head, *kept, t])) > MAX_SELECTION_NAME - 30:
            break
        kept.append(t)
    return "-".join([*head, *kept, f"and{len(tags) - len(kept)}more", digest, *tail])


# ------------------------------------------------------------------------ rows and summary
CORE = ("leantile", "eager", "compile", "compile_ro")


def suite_row(case: Case, r: dict) -> dict:
    """The suite's row for one run_one result r (or an error / skip record)."""
    row = {"case": case.name, "arch": case.arch, "model": case.model, "tags": list(case.tags), "dtype": case.dtype,
           "shape": dict(r.get("shape") or case.sizes)}
    if "gpu_ms" not in r:
        row.update({k: r[k] for k in ("how", "error", "skipped", "trace") if k in r})
        return row
    g = {k: v for k, v in r["gpu_ms"].items() if _finite(v)}
    vendors = {k: v for k, v in g.items() if k not in CORE}
    best = min(vendors, key=vendors.get) if vendors else None
    lt = g.get("leantile")
    row.update(how="tuned" if r.get("tuned") else "default", candidate=r["candidate"], tiles=r["tiles"],
               kernels=r.get("kernels"), ok=bool(r["ok"]), rel_err=r["rel_err"], compile_s=r.get("compile_s"),
               gpu_ms=g, ms=r.get("ms"), tflops=r.get("tflops"), input_scale=r.get("input_scale"), vendor=best,
               vs_compile=_ratio(g.get("compile"), lt), vs_eager=_ratio(g.get("eager"), lt),
               vs_vendor=_ratio(vendors.get(best), lt), vs_flex=_ratio(g.get("flex_attention"), lt))
    return row


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _ratio(other, lt):
    """other / leantile: above 1, leantile is faster."""
    return other / lt if _finite(other) and _finite(lt) and lt > 0 else None


def _geomean(xs):
    xs = [x for x in xs if _finite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(rows: list[dict]) -> dict:
    """Geomean of the ratio vs torch.compile over the rows checked ok (all, and the shipped
    default plans alone), also vs eager and vs the vendor path; the worst row; how many are
    below BELOW; counts of errors, check failures and skips."""
    ok = [r for r in rows if r.get("ok") and r.get("vs_compile") is not None]
    worst = min(ok, key=lambda r: r["vs_compile"], default=None)
    return {"rows": len(rows), "ok": len(ok), "errors": sum("error" in r for r in rows),
            "check_failed": sum(r.get("ok") is False for r in rows), "skipped": sum("skipped" in r for r in rows),
            "geomean_vs_compile": _geomean(r["vs_compile"] for r in ok),
            "geomean_vs_compile_default": _geomean(r["vs_compile"] for r in ok if r["how"] == "default"),
            "geomean_vs_compile_tuned": _geomean(r["vs_compile"] for r in ok if r["how"] == "tuned"),
            "geomean_vs_eager": _geomean(r["vs_eager"] for r in ok),
            "geomean_vs_vendor": _geomean(r["vs_vendor"] for r in ok if r.get("vs_vendor") is not None),
            "geomean_vs_flex": _geomean(r.get("vs_flex") for r in ok),
            "worst": None if worst is None else {"case": worst["case"], "how": worst["how"],
                                                 "vs_compile": worst["vs_compile"]},
            f"below_{BELOW}x": sum(r["vs_compile"] < BELOW for r in ok)}


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def markdown(rows: list[dict], meta: dict) -> str:
    s = summary(rows)
    lines = [f"# leantile bench --suite {meta['selection']} on {meta['device']} (torch {meta['torch']})", "",
             "GPU time: `do_bench_cudagraph` medians, best of two interleaved rounds (ms). Ratios are the other "
             "path's time over leantile's: above 1, leantile is faster. vendor: the fastest vendor path "
             "(cuBLAS, SDPA cuDNN/flash; `cublas_matmul_alone` times the GEMM without its norm/epilogue). "
             "how: `default` is the plan leantile ships for the shape (cost model), `tuned` its tuned entry.", "",
             "| case | model | dtype | shape | how | candidate | tiles | ok | rel. err | leantile ms | compile ms "
             "| vs compile | vs eager | vs vendor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        head = f"| {r['case']} | {r['model']} | {r['dtype']} | {shape} |"
        if "gpu_ms" not in r:
            what = f"SKIPPED: {r['skipped']}" if "skipped" in r else f"ERROR: {r.get('error', '?')}"
            lines.append(f"{head} | {' '.join(what.split())[:160]} | | | | | | | | |")
            continue
        tiles = " ".join(f"{k}={v}" for k, v in r["tiles"].items())
        vend = f"{_x(r['vs_vendor'])} ({r['vendor']})" if r.get("vendor") else "-"
        if r.get("vs_flex") is not None and r.get("vendor") != "flex_attention":  # issue 51's yardstick
            vend += f"; {_x(r['vs_flex'])} (flex_attention)"
        lines.append(f"{head} {r['how']} | {r['candidate']} | {tiles} | {r['ok']} | {r['rel_err']:.1e} | "
                     f"{r['gpu_ms']['leantile']:.4f} | {r['gpu_ms'].get('compile', float('nan')):.4f} | "
                     f"{_x(r['vs_compile'])} | {_x(r['vs_eager'])} | {vend} |")
    w = s["worst"]
    lines += ["", "## Summary", "",
              f"- rows {s['rows']}: {s['ok']} checked ok and timed, {s['check_failed']} check failed, "
              f"{s['errors']} errors, {s['skipped']} skipped",
              f"- geomean vs torch.compile: {_x(s['geomean_vs_compile'])} over every ok row, "
              f"{_x(s['geomean_vs_compile_default'])} over the shipped default plans, "
              f"{_x(s['geomean_vs_compile_tuned'])} over the tuned entries",
              f"- geomean vs eager {_x(s['geomean_vs_eager'])}, vs the vendor path {_x(s['geomean_vs_vendor'])}"
              + (f", vs FlexAttention {_x(s['geomean_vs_flex'])}" if s["geomean_vs_flex"] else ""),
              f"- worst vs torch.compile: {w['case']} ({w['how']}) {_x(w['vs_compile'])}" if w else "- worst: -",
              f"- below {BELOW}x of torch.compile: {s[f'below_{BELOW}x']} rows",
              f"- wall time {meta.get('wall_s', 0):.0f} s; selection: {meta['selection']} "
              f"({meta['cases']} cases{', ' + meta['stopped'] if meta.get('stopped') else ''})"]
    return "\n".join(lines) + "\n"


def chart(rows: list[dict], path: Path, title: str) -> None:
    """Ratio vs torch.compile per row (log scale, a line at 1.0), coloured by default / tuned."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .files import write_atomic
    from matplotlib.patches import Patch

    ok = [r for r in rows if r.get("vs_compile") is not None]
    fig, ax = plt.subplots(figsize=(max(8, 0.28 * len(ok) + 2), 6))
    colors = {"default": "tab:blue", "tuned": "tab:orange", "check failed": "tab:red"}
    for i, r in enumerate(ok):  # a bar from 1.0 to the ratio: up where leantile is faster
        ax.bar(i, r["vs_compile"] - 1.0, bottom=1.0, color=colors[r["how"] if r["ok"] else "check failed"])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(ok)), [f"{r['case']} ({r['how'][0]})" for r in ok], rotation=75, fontsize=6, ha="right")
    ax.set_ylabel("torch.compile ms / leantile ms")
    ax.set_title(f"{title} (above 1: leantile faster)", fontsize=9)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in colors.items()], fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic(path, buf.getvalue())


# ------------------------------------------------------------------------ running
def measure(case: Case, g: ir.Graph, base, has_tuned: bool) -> list[dict]:
    """The case's rows: the plan leantile.compile ships (its tuned entry where one exists for this
    exact shape, dtype and GPU) and, where that was a tuned entry, the default plan too."""
    import gc

    import torch

    from .bench import prepared, run_one
    from .reference import natural_scale, random_inputs
    from .sources import load_source

    rows, scale = [], natural_scale(g)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    try:
        inputs = random_inputs(g, seed=0, device=device, scale=scale)  # one set for every plan and contender
        inputs = prepared(load_source(case.source, case.sizes), inputs, case.source)  # the module's f16 graph
    except Exception as e:  # out of memory, say: this case's row, and the others go on
        return [suite_row(case, {"error": f"inputs: {type(e).__name__}: {' '.join(str(e).split())[:500]}"})]
    for tuned in ((True, False) if has_tuned else (True,)):
        torch._dynamo.reset()  # every case compiles afresh: dynamo's recompile limit never turns compile into eager
        try:
            r = {**run_one(g, tuned=tuned, baselines_fn=base, inputs=inputs), "input_scale": scale}
        except Exception as e:
            r = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:1000]}", "trace": traceback.format_exc()[-3000:],
                 "how": "tuned" if tuned and has_tuned else "default"}
        rows.append(suite_row(case, r))
        gc.collect()
        torch.cuda.empty_cache()
        if "gpu_ms" in r and not r.get("tuned"):
            break  # the tuned entry did not apply (or there is none): this row is the default already
    return rows


def run_suite(suite: str = "full", *, out: str = "benchmarks/results", shard: str | None = None, limit: int | None = None,
              tags: list[str] | None = None, time_budget: float | None = None, precompile: bool = True) -> int:
    """`leantile bench --suite ...`: the cases `select` picks, measured, written to `out` as they
    come; time_budget (seconds): the cases after it are rows saying so; precompile: compile the
    kernels ahead in a process pool (leantile.cli.bench checks the arguments and the GPU)."""
    import torch

    from .files import check_out_dir, write_atomic
    from .progress import progress
    from .tuned import load_tuned

    check_out_dir(out, "--out")
    cases = select(suite=suite, shard=shard, limit=limit, tags=tags)
    sel = selection_name(suite, shard, limit, tags)
    gpu = torch.cuda.get_device_name()
    out = Path(out)
    stem = f"suite-{gpu.replace(' ', '-')}-{sel}"
    meta = {"selection": sel, "cases": len(cases), "device": gpu, "torch": torch.__version__,
            "time_budget_s": time_budget}
    t0 = time.time()
    work = []  # (case, graph, baselines, tuned entry exists) or (case, None, None, skip/error record)
    for c in cases:
        try:
            g, base = build(c)
            need = footprint(g)
            if need > MEMORY_LIMIT:
                work.append((c, None, None, {"skipped": f"needs ~{need / 1e9:.0f} GB (inputs, the reference and "
                                                         f"eager's intermediates; the limit is {MEMORY_LIMIT / 1e9:.0f} GB)"}))
                continue
            work.append((c, g, base, load_tuned(g.name, g.axes, c.dtype, gpu) is not None))
        except Exception as e:
            work.append((c, None, None, {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}))
    jobs, job_of = [], {}
    for i, (c, g, _, tuned) in enumerate(work):
        if g is not None and precompile:
            job_of[i] = [len(jobs)] + ([len(jobs) + 1] if tuned is True else [])
            jobs += [(g.to_json(), gpu, True)] + ([(g.to_json(), gpu, False)] if tuned is True else [])
    pool, futs = precompile_pool(jobs, None)
    rows: list[dict] = []

    def publish():
        meta["wall_s"] = round(time.time() - t0, 1)
        write_atomic(out / f"{stem}.json", json.dumps(_clean({**meta, "summary": summary(rows), "rows": rows}),
                                                      indent=1) + "\n")
        write_atomic(out / f"{stem}.md", markdown(rows, meta))

    try:
        for i, (c, g, base, extra) in enumerate(progress(work, "bench --suite")):
            before = len(rows)
            if time_budget is not None and time.time() - t0 > time_budget:
                meta["stopped"] = f"stopped at the time budget of {time_budget:.0f} s"
                rows.append(suite_row(c, {"skipped": f"not run: --time-budget {time_budget:.0f} s reached"}))
                continue
            if g is None:
                rows.append(suite_row(c, extra))
            else:
                for j in job_of.get(i, []):  # its kernels were compiled in the pool (while earlier cases ran)
                    try:
                        futs[j].result(timeout=300)
                    except Exception:  # the loop compiles (and reports) it itself
                        pass
                rows += measure(c, g, base, has_tuned=extra is True)
            for r in rows[before:]:
                print(json.dumps(_clean({k: v for k, v in r.items() if k != "trace"})), flush=True)
            publish()
    finally:
        if pool is not None:  # what it still compiles is not waited for
            from .process_pool import stop_now
            stop_now(pool)
    publish()
    chart(rows, out / f"{stem}.png", f"leantile vs torch.compile, {sel}, {gpu}")
    print(markdown(rows, meta), flush=True)
    return 0 if all(r.get("ok") or "skipped" in r for r in rows) else 1


def _clean(x):
    """x with non-finite floats as None (strict JSON)."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x
