import LeanTile.DagM

namespace LeanTile
open DSL

/-- X W. -/
def matmulGraph : Except String Graph :=
  buildGraphWithOutput "matmul" [("m", 1024), ("d", 4096), ("n", 4096)] do
    let x ← input "X" ["m", "d"]
    let w ← input "W" ["d", "n"]
    let out ← matmul x w "d" "d"
    pure out

end LeanTile
