import LeanTile.Architectures.Attention
import LeanTile.Architectures.Swiglu
import LeanTile.Architectures.Matmul
import LeanTile.Architectures.Rmsnorm
import LeanTile.Architectures.RmsnormMlp
import LeanTile.Architectures.LayernormLinearGelu

/-!
# LeanTile.Architectures — the six built-ins

Each built-in is a `DagM` program in its own file under `Architectures/`.
To add one: write `Architectures/Foo.lean` in the same style (one `let x ← op args`
per line, the output returned by `pure`), import it here, add it to `builtins`, and add
its (initially empty) derivation to `LeanTile.Derivation`.
-/

namespace LeanTile

/-- Built-ins in export order: (file name stem of the JSON, graph). -/
def builtins : List (String × Except String Graph) :=
  [ ("attention", attentionGraph)
  , ("swiglu", swigluGraph)
  , ("matmul", matmulGraph)
  , ("rmsnorm", rmsnormGraph)
  , ("rmsnorm_mlp", rmsnormMlpGraph)
  , ("layernorm_linear_gelu", layernormLinearGeluGraph) ]

end LeanTile
