"""Train a small decoder-only transformer whose norms, projections, attention, MLP and loss are
leantile ops (issue 50), beside the same model in plain PyTorch from the same initial weights on
the same batches, and compare the loss curves.

    python examples/train_lm.py --config tiny --device cpu --steps 20      # CI-sized, the CPU reference
    python examples/train_lm.py --config small --steps 200 --out DIR       # on a GPU: loss-curve JSON + plot

Each block: h = x + Wo attn(causal, rope-free)(RMSNorm(x) Wqkv); x' = h + SwiGLU(RMSNorm(h)); the head
is RMSNorm, the vocabulary projection and the mean cross-entropy in one op. Token embedding,
reshapes and the optimizer are torch. The data is generated: sequences from a fixed random
bigram table with a few likely successors per token, so the loss falls from log(vocab) toward
the table's entropy. Every leantile op trains through its autograd (leantile.torch.op: the
backward graph of leantile.autodiff, derived and compiled as another op).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))


@dataclass(frozen=True)
class Config:
    vocab: int
    d: int
    heads: int
    d_h: int
    ffn: int
    layers: int
    batch: int
    seq: int
    lr: float = 3e-3
    dtype: str = "f32"


CONFIGS = {
    "tiny": Config(vocab=48, d=32, heads=2, d_h=16, ffn=64, layers=2, batch=2, seq=12),
    "small": Config(vocab=2048, d=256, heads=4, d_h=64, ffn=704, layers=4, batch=8, seq=256, lr=2e-3, dtype="bf16"),
}


# -- the graphs (leantile.dag) -----------------------------------------------------------------------

def norm_linear(g, dt: str, width: str = "n"):
    """RMSNorm(X) gamma W: X [m, d], gamma [d], W [d, width]."""
    x, gain = g.input("X", ["m", "d"], dt), g.input("gamma", ["d"], dt)
    return g.matmul(g.mul(g.rms_norm(x, "d"), gain), g.input("W", ["d", width], dt), "d", "d")


def causal_attention(g, dt: str):
    """softmax(mask(Q K^T) / sqrt(d_h)) V over [b, h, t, d_h], key s <= query t."""
    q = g.input("Q", ["b", "h", "t", "e"], dt)
    k = g.input("K", ["b", "h", "s", "e"], dt)
    v = g.input("V", ["b", "h", "s", "e"], dt)
    scores = g.matmul(q, k, "e", "e")  # [b, h, t, s]
    masked = g.select(g.le(g.iota("s"), g.iota("t")), scores, g.const("-inf"))
    p = g.softmax(g.div(masked, g.sqrt(g.size_const("e"))), "s")
    return g.matmul(p, v, "s", "s")  # [b, h, t, e]


def linear_residual(g, dt: str):
    """X + O W: O [m, k], W [k, d], X [m, d]."""
    o, w = g.input("O", ["m", "k"], dt), g.input("W", ["k", "d"], dt)
    return g.add(g.input("X", ["m", "d"], dt), g.matmul(o, w, "k", "k"))


def swiglu_residual(g, dt: str):
    """X + (silu(N W_gate) * (N W_up)) W_down with N = RMSNorm(X) gamma."""
    x, gain = g.input("X", ["m", "d"], dt), g.input("gamma", ["d"], dt)
    n = g.mul(g.rms_norm(x, "d"), gain)
    gate = g.matmul(n, g.input("W_gate", ["d", "f"], dt), "d", "d")
    up = g.matmul(n, g.input("W_up", ["d", "f"], dt), "d", "d")
    return g.add(x, g.matmul(g.mul(g.silu(gate), up), g.input("W_down", ["f", "d"], dt), "f", "f"))


def lm_loss(g, dt: str):
    """mean over tokens of logsumexp(N W) - (N W)[label], N = RMSNorm(X) gamma; labels float32 ids."""
    logits = norm_linear(g, dt, "v")  # [m, v]
    label = g.input("label", ["m"], "f32")
    mx = g.red("max", logits, "v")
    lse = g.add(g.log(g.red("sum", g.exp(g.sub(logits, mx)), "v")), mx)
    picked = g.red("sum", g.mul(logits, g.eq(g.iota("v"), label)), "v")
    return g.div(g.red("sum", g.sub(lse, picked), "m"), g.size_const("m"))


def _graph(name: str, body, axes: dict, dtype: str):
    from leantile.dag import build_graph_with_output
    return build_graph_with_output(name, axes, lambda g: body(g, dtype))


def graphs(c: Config) -> dict:
    m = c.batch * c.seq
    hd = c.heads * c.d_h
    return {
        "qkv": _graph("lm_qkv", norm_linear, {"m": m, "d": c.d, "n": 3 * hd}, c.dtype),
        "attn": _graph("lm_attn", causal_attention,
                       {"b": c.batch, "h": c.heads, "t": c.seq, "s": c.seq, "e": c.d_h}, c.dtype),
        "out": _graph("lm_out", linear_residual, {"m": m, "k": hd, "d": c.d}, c.dtype),
        "mlp": _graph("lm_mlp", swiglu_residual, {"m": m, "d": c.d, "f": c.ffn}, c.dtype),
        "loss": _graph("lm_loss", lm_loss, {"m": m, "d": c.d, "v": c.vocab}, c.dtype),
    }


# -- the two models -----------------------------------------------------------------------------------

def init_weights(c: Config, seed: int, torch):
    """Initial weights (float32, on the CPU): N(0, 1/fan_in) projections, unit gains."""
    gen = torch.Generator().manual_seed(seed)
    hd = c.heads * c.d_h

    def w(*shape):
        return torch.randn(shape, generator=gen) / math.sqrt(shape[0])
    out = {"emb": torch.randn(c.vocab, c.d, generator=gen) * 0.5, "head_gain": torch.ones(c.d),
           "head": w(c.d, c.vocab)}
    for i in range(c.layers):
        out.update({f"{i}.g1": torch.ones(c.d), f"{i}.qkv": w(c.d, 3 * hd), f"{i}.wo": w(hd, c.d),
                    f"{i}.g2": torch.ones(c.d), f"{i}.gate": w(c.d, c.ffn), f"{i}.up": w(c.d, c.ffn),
                    f"{i}.down": w(c.ffn, c.d)})
    return out


def _split_heads(qkv, c: Config):
    """[m, 3 h d_h] -> three [b, h, t, d_h] (contiguous)."""
    x = qkv.view(c.batch, c.seq, 3, c.heads, c.d_h).permute(2, 0, 3, 1, 4)
    return [t.contiguous() for t in x]


def _merge_heads(o, c: Config):
    return o.permute(0, 2, 1, 3).reshape(c.batch * c.seq, c.heads * c.d_h).contiguous()


class LeantileLM:
    """The model through leantile ops (one lt.op per graph, compiled once for the config's sizes)."""

    def __init__(self, c: Config, weights: dict, device: str, torch):
        import leantile
        import leantile.torch as lt
        self.c, self.torch = c, torch
        dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[c.dtype]
        self.params = {k: v.to(dt).to(device, copy=True).requires_grad_() for k, v in weights.items()}
        self.ops = {k: lt.op(leantile.compile(g, device=device)) for k, g in graphs(c).items()}

    def loss(self, tokens, labels):
        c, p, f = self.c, self.params, self.ops
        x = p["emb"][tokens.reshape(-1)]
        for i in range(c.layers):
            q, k, v = _split_heads(f["qkv"](x, p[f"{i}.g1"], p[f"{i}.qkv"]), c)
            x = f["out"](_merge_heads(f["attn"](q, k, v), c), p[f"{i}.wo"], x)
            x = f["mlp"](x, p[f"{i}.g2"], p[f"{i}.gate"], p[f"{i}.up"], p[f"{i}.down"])
        return f["loss"](x, p["head_gain"], p["head"], labels.reshape(-1).float())


class TorchLM:
    """The same model in plain PyTorch (the reference curve)."""

    def __init__(self, c: Config, weights: dict, device: str, torch):
        self.c, self.torch = c, torch
        dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[c.dtype]
        self.params = {k: v.to(dt).to(device, copy=True).requires_grad_() for k, v in weights.items()}

    def _norm(self, x, gain):
        return x * self.torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-5).to(x.dtype) * gain

    def loss(self, tokens, labels):
        torch, c, p = self.torch, self.c, self.params
        F = torch.nn.functional
        x = p["emb"][tokens.reshape(-1)]
        for i in range(c.layers):
            q, k, v = _split_heads(self._norm(x, p[f"{i}.g1"]) @ p[f"{i}.qkv"], c)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + _merge_heads(o, c) @ p[f"{i}.wo"]
            n = self._norm(x, p[f"{i}.g2"])
            x = x + (F.silu(n @ p[f"{i}.gate"]) * (n @ p[f"{i}.up"])) @ p[f"{i}.down"]
        logits = self._norm(x, p["head_gain"]) @ p["head"]
        return F.cross_entropy(logits.float(), labels.reshape(-1))


def batches(c: Config, steps: int, seed: int, torch):
    """(tokens, next tokens) [batch, seq] from a fixed random bigram table: each token has 4 likely
    successors."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.full((c.vocab, c.vocab), -4.0)
    for a in range(c.vocab):
        logits[a, torch.randperm(c.vocab, generator=gen)[:4]] = 2.0
    table = torch.softmax(logits, -1)
    for _ in range(steps):
        seq = torch.empty(c.batch, c.seq + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(0, c.vocab, (c.batch,), generator=gen)
        for t in range(c.seq):
            seq[:, t + 1] = torch.multinomial(table[seq[:, t]], 1, generator=gen).squeeze(1)
        yield seq[:, :-1], seq[:, 1:]


def train(c: Config, steps: int, device: str, seed: int = 0) -> dict:
    import torch
    if device.startswith("cuda"):  # the ops' forward and backward kernels compiled ahead, in parallel
        from leantile.precompile import precompile_graphs, training_graphs
        precompile_graphs([t for g in graphs(c).values() for t in training_graphs(
            g, [n.name for n in g.inputs() if n.name != "label"])], torch.cuda.get_device_name())
    weights = init_weights(c, seed, torch)
    models = {"leantile": LeantileLM(c, weights, device, torch), "torch": TorchLM(c, weights, device, torch)}
    opts = {k: torch.optim.AdamW(m.params.values(), lr=c.lr, weight_decay=0.0) for k, m in models.items()}
    curves: dict[str, list[float]] = {k: [] for k in models}
    for tokens, labels in batches(c, steps, seed + 1, torch):
        tokens, labels = tokens.to(device), labels.to(device)
        for k, m in models.items():
            opts[k].zero_grad(set_to_none=True)
            loss = m.loss(tokens, labels)
            loss.backward()
            opts[k].step()
            curves[k].append(loss.item())
    a, b = curves["leantile"], curves["torch"]
    rel = [abs(x - y) / abs(y) for x, y in zip(a, b)]
    return {"config": asdict(c), "steps": steps, "device": device, "curves": curves,
            "max_rel_diff": max(rel), "final_rel_diff": rel[-1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--device", default=None, help="cuda (default where there is one) or cpu")
    ap.add_argument("--out", default=None, help="a folder for the JSON (and a plot where matplotlib is installed)")
    a = ap.parse_args(argv)
    import torch
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    r = train(CONFIGS[a.config], a.steps, device)
    la, lt_ = r["curves"]["leantile"], r["curves"]["torch"]
    print(f"{a.config} on {device}, {a.steps} steps: loss {la[0]:.4f} -> {la[-1]:.4f} (torch {lt_[0]:.4f} -> {lt_[-1]:.4f}); "
          f"largest relative difference {r['max_rel_diff']:.2e}, at the last step {r['final_rel_diff']:.2e}")
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"train-lm-{a.config}-{device}"
        tmp = out / f"{stem}.json.tmp"
        tmp.write_text(json.dumps(r, indent=1))
        tmp.replace(out / f"{stem}.json")
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return 0
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(la, label="leantile ops")
        ax.plot(lt_, label="PyTorch", linestyle="--")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy")
        ax.set_title(f"train_lm {a.config} on {device}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
