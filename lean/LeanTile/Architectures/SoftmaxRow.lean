import LeanTile.DagM

namespace LeanTile
open DSL

/-- softmax over a long row alone (rows 4096, cols 65536). A user architecture (not a
built-in); Python mirror: examples/architectures/softmax_row.py. -/
def softmaxRowGraph : Except String Graph :=
  buildGraphWithOutput "softmax_row" [("rows", 4096), ("cols", 65536)] do
    let x ← input "X" ["rows", "cols"]
    let out ← softmaxSubdag x "cols"
    pure out

end LeanTile
