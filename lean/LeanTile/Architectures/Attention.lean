import LeanTile.DagM

namespace LeanTile
open DSL

/-- softmax(Q Kᵀ) V per head, no 1/sqrt(d_h) scale (as published). -/
def attentionGraph : Except String Graph :=
  buildGraphWithOutput "attention" [("h", 16), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128)] do
    let q ← input "Q" ["h", "t_q", "d_h"]
    let k ← input "K" ["h", "t_kv", "d_h"]
    let v ← input "V" ["h", "t_kv", "d_h"]
    let scores ← matmul q k "d_h" "d_h"
    let p ← softmaxSubdag scores "t_kv"
    let out ← matmul p v "t_kv" "t_kv"
    pure out

end LeanTile
