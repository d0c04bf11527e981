import LeanTile.DagM

namespace LeanTile
open DSL

/-- softmax(Q Kᵀ / sqrt(d_h)) V per head. A user architecture (not a built-in); Python
mirror: examples/architectures/attention_scaled.py. The derivation folds the constant
1/sqrt(d_h) into the exp2 multiplier. -/
def attentionScaledGraph : Except String Graph :=
  buildGraphWithOutput "attention_scaled" [("h", 16), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128)] do
    let q ← input "Q" ["h", "t_q", "d_h"]
    let k ← input "K" ["h", "t_kv", "d_h"]
    let v ← input "V" ["h", "t_kv", "d_h"]
    let scores ← matmul q k "d_h" "d_h"
    let dh ← sizeConst "d_h"
    let scale ← sqrt dh
    let s ← div scores scale
    let p ← softmaxSubdag s "t_kv"
    let out ← matmul p v "t_kv" "t_kv"
    pure out

end LeanTile
