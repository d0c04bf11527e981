import LeanTile.Architectures.Attention
import LeanTile.Architectures.Swiglu
import LeanTile.Architectures.Matmul
import LeanTile.Architectures.Rmsnorm
import LeanTile.Architectures.RmsnormMlp
import LeanTile.Architectures.LayernormLinearGelu
import LeanTile.Architectures.CausalAttention
import LeanTile.Architectures.SlidingWindowAttention
import LeanTile.Architectures.GqaAttention
import LeanTile.Architectures.Geglu
import LeanTile.Architectures.AttentionScaled
import LeanTile.Architectures.SoftmaxRow

/-!
# LeanTile.Architectures — the built-ins and the user architectures

Each architecture is a `DagM` program in its own file under `Architectures/`.
To add one (docs/tutorial.md walks through it): write `Architectures/Foo.lean` in the same
style (one `let x ← op args` per line, the output returned by `pure`), import it here, add
it to `userArchitectures` and to `architectureFiles`, and add its derivation to
`LeanTile.Derivation` (`[]` is valid: the graph still gets a plan). `lake exe
leantile-export exports` then writes `exports/foo.json`.

Built-ins have a Python mirror in `python/leantile/architectures/`; user architectures
have theirs wherever the user keeps it (the three below: `examples/architectures/`).
-/

namespace LeanTile

/-- Built-ins in export order: (file name stem of the JSON, graph). -/
def builtins : List (String × Except String Graph) :=
  [ ("attention", attentionGraph)
  , ("swiglu", swigluGraph)
  , ("matmul", matmulGraph)
  , ("rmsnorm", rmsnormGraph)
  , ("rmsnorm_mlp", rmsnormMlpGraph)
  , ("layernorm_linear_gelu", layernormLinearGeluGraph)
  , ("causal_attention", causalAttentionGraph)
  , ("sliding_window_attention", slidingWindowAttentionGraph)
  , ("gqa_attention", gqaAttentionGraph) ]

/-- Architectures added the way a user adds one (not built into the Python package). -/
def userArchitectures : List (String × Except String Graph) :=
  [ ("geglu", gegluGraph)
  , ("attention_scaled", attentionScaledGraph)
  , ("softmax_row", softmaxRowGraph) ]

/-- Everything `lake exe leantile-export` writes, in export order. -/
def exportedArchitectures : List (String × Except String Graph) :=
  builtins ++ userArchitectures

/-- JSON stem ↦ the Lean file that defines it, so the exporter's error messages name the
file the user has to fix. -/
def architectureFiles : List (String × String) :=
  [ ("attention", "lean/LeanTile/Architectures/Attention.lean")
  , ("swiglu", "lean/LeanTile/Architectures/Swiglu.lean")
  , ("matmul", "lean/LeanTile/Architectures/Matmul.lean")
  , ("rmsnorm", "lean/LeanTile/Architectures/Rmsnorm.lean")
  , ("rmsnorm_mlp", "lean/LeanTile/Architectures/RmsnormMlp.lean")
  , ("layernorm_linear_gelu", "lean/LeanTile/Architectures/LayernormLinearGelu.lean")
  , ("causal_attention", "lean/LeanTile/Architectures/CausalAttention.lean")
  , ("sliding_window_attention", "lean/LeanTile/Architectures/SlidingWindowAttention.lean")
  , ("gqa_attention", "lean/LeanTile/Architectures/GqaAttention.lean")
  , ("geglu", "lean/LeanTile/Architectures/Geglu.lean")
  , ("attention_scaled", "lean/LeanTile/Architectures/AttentionScaled.lean")
  , ("softmax_row", "lean/LeanTile/Architectures/SoftmaxRow.lean") ]

end LeanTile
