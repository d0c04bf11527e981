"""Attention as researchers vary it (issue 51), written as a user writes them with leantile.dag:
logit soft-capping (Gemma 2), ALiBi, document masking (ids per position read at run time) and
MLA-style head dims (q.k over 192, v over 128). Not built-ins (no Lean sources, no tuned
entries): the graphs `leantile bench --suite attention-variants` times against FlexAttention
(each module's `baselines`) at the shapes below. A module may define `prepare_inputs(t)`, which
turns the suite's random inputs into the ones its graph means (document ids, ALiBi slopes)."""
from __future__ import annotations

from pathlib import Path

DIR = Path(__file__).resolve().parent
NAMES = ("softcap_attention", "alibi_attention", "document_attention", "mla_attention")


def source(name: str) -> str:
    """What `leantile` takes as SOURCE for the variant (module.py:build)."""
    return f"{DIR / name}.py:build"


def module(name: str):
    from importlib import import_module
    return import_module(f"{__name__}.{name}")


# The suite's cases (leantile.suite builds its Case of each: name, architecture, sizes, dtype,
# model; tagged "variants"): the issue's shape (h 16, t 4096, f16, d_h 128, causal) for each
# variant, and the shapes the models that use them run (Gemma 2's soft-capped heads of 256 in
# bf16; MLA at DeepSeek-V2's 128 heads).
_ISSUE = {"h": 16, "t_q": 4096, "t_kv": 4096}
_GEMMA2 = {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 256}
CASES = (
    ("softcap_attention_t4096", "softcap_attention", {**_ISSUE, "d_h": 128}, "f16", "issue"),
    ("softcap_attention_gemma2_9b_t2048_bf16", "softcap_attention", _GEMMA2, "bf16", "gemma2_9b"),
    ("alibi_attention_t4096", "alibi_attention", {**_ISSUE, "d_h": 128}, "f16", "issue"),
    ("alibi_attention_t2048_bf16", "alibi_attention", {"h": 32, "t_q": 2048, "t_kv": 2048, "d_h": 128}, "bf16",
     "issue"),
    ("document_attention_t4096", "document_attention", {**_ISSUE, "d_h": 128}, "f16", "issue"),
    # a packed batch of 16384 tokens; 8 heads: the suite's float32 reference and eager's scores fit its 40 GB
    ("document_attention_t16384_h8_bf16", "document_attention", {"h": 8, "t_q": 16384, "t_kv": 16384, "d_h": 128},
     "bf16", "issue"),
    ("mla_attention_t4096", "mla_attention", {**_ISSUE, "d_qk": 192, "d_v": 128}, "f16", "issue"),
    ("mla_attention_deepseek_v2_t2048_bf16", "mla_attention",
     {"h": 128, "t_q": 2048, "t_kv": 2048, "d_qk": 192, "d_v": 128}, "bf16", "issue"),
    ("causal_attention_gemma2_9b_t4096", "causal_attention", {**_ISSUE, "d_h": 256}, "f16", "gemma2_9b"),
    ("causal_attention_gemma2_9b_t2048_bf16", "causal_attention", _GEMMA2, "bf16", "gemma2_9b"),
)


def flex_paths(t: dict, score_mod=None, mask_mod=None, with_build: bool = False) -> dict:
    """{"flex_attention": FlexAttention with `score_mod` and the block mask of `mask_mod` built
    ahead} (causal_attention.flex_path); `with_build` adds the path that builds the mask in every
    call ("flex_attention_with_mask_build")."""
    from ..causal_attention import flex_path
    out = {"flex_attention": flex_path(t, mask_mod, score_mod)}
    if with_build and mask_mod is not None:
        out["flex_attention_with_mask_build"] = flex_path(t, mask_mod, score_mod, build_each_call=True)
    return out


def working(paths: dict) -> dict:
    """The paths that run here (on a GPU: one call each; a backend that refuses these shapes,
    say SDPA's flash with different q.k and v head dims, is left out rather than failing the row)."""
    import torch
    if not torch.cuda.is_available():
        return paths
    out = {}
    for name, f in paths.items():
        try:
            f()
            out[name] = f
        except Exception as e:  # a vendor path that does not take this case is no contender
            DROPPED[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"
    return out


DROPPED: dict[str, str] = {}  # the vendor paths `working` left out, and why (the last case's)
