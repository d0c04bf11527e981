import LeanTile.DagM

namespace LeanTile
open DSL

/-- rmsnorm(X) W: eps 1e-5, no gain. -/
def rmsnormGraph : Except String Graph :=
  buildGraphWithOutput "rmsnorm" [("m", 1024), ("d", 4096), ("n", 4096)] do
    let x ← input "X" ["m", "d"]
    let w ← input "W" ["d", "n"]
    let xn ← rmsNormSubdag x "d" "1e-05"
    let out ← matmul xn w "d" "d"
    pure out

end LeanTile
