import LeanTile.DagM

namespace LeanTile
open DSL

/-- Grouped-query attention: softmax(Q Kᵀ / sqrt(d_h)) V where the `g` query heads of a group
share one K and V: Q[h_kv, g, t_q, d_h] against K, V[h_kv, t_kv, d_h]. The group axis is on Q
alone, so one CTA serves the heads of a group and loads each K and V block once
(`pack_query_group`). Python mirror: python/leantile/architectures/gqa_attention.py. -/
def gqaAttentionGraph : Except String Graph :=
  buildGraphWithOutput "gqa_attention" [("h_kv", 8), ("g", 4), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128)] do
    let q ← input "Q" ["h_kv", "g", "t_q", "d_h"]
    let k ← input "K" ["h_kv", "t_kv", "d_h"]
    let v ← input "V" ["h_kv", "t_kv", "d_h"]
    let scores ← matmul q k "d_h" "d_h"
    let dh ← sizeConst "d_h"
    let scale ← sqrt dh
    let s ← div scores scale
    let p ← softmaxSubdag s "t_kv"
    let out ← matmul p v "t_kv" "t_kv"
    pure out

end LeanTile
