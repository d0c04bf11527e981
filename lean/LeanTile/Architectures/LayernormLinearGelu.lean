import LeanTile.DagM

namespace LeanTile
open DSL

/-- gelu_tanh(layernorm(X) W + b): layernorm without affine, eps 1e-5. -/
def layernormLinearGeluGraph : Except String Graph :=
  buildGraphWithOutput "layernorm_linear_gelu" [("m", 1024), ("d", 1024), ("n", 4096)] do
    let x ← input "X" ["m", "d"]
    let w ← input "W" ["d", "n"]
    let b ← input "b" ["n"]
    let xn ← layerNormSubdag x "d" "1e-05"
    let y ← matmul xn w "d" "d"
    let z ← add y b
    let out ← geluTanh z
    pure out

end LeanTile
