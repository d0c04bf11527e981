import LeanTile.DagM

namespace LeanTile
open DSL

/-- (rmsnorm(X) W_up) * (rmsnorm(X) W_gate), one shared rmsnorm. -/
def rmsnormMlpGraph : Except String Graph :=
  buildGraphWithOutput "rmsnorm_mlp" [("m", 1024), ("d", 1024), ("n", 1024)] do
    let x ← input "X" ["m", "d"]
    let wUp ← input "W_up" ["d", "n"]
    let wGate ← input "W_gate" ["d", "n"]
    let xn ← rmsNormSubdag x "d" "1e-05"
    let up ← matmul xn wUp "d" "d"
    let gate ← matmul xn wGate "d" "d"
    let out ← mul up gate
    pure out

end LeanTile
