import LeanTile.DagM

namespace LeanTile
open DSL

/-- GeGLU MLP: gelu_tanh(X W_gate) * (X W_up). A user architecture (not a built-in);
Python mirror: examples/architectures/geglu.py. -/
def gegluGraph : Except String Graph :=
  buildGraphWithOutput "geglu" [("m", 1024), ("n", 2048), ("d", 2048)] do
    let x ← input "X" ["m", "d"]
    let wGate ← input "W_gate" ["d", "n"]
    let wUp ← input "W_up" ["d", "n"]
    let g ← matmul x wGate "d" "d"
    let gate ← geluTanh g
    let up ← matmul x wUp "d" "d"
    let out ← mul gate up
    pure out

end LeanTile
