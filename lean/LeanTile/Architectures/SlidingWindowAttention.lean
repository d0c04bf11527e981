import LeanTile.DagM

namespace LeanTile
open DSL

/-- Sliding-window attention (Mistral): softmax(mask(Q Kᵀ) / sqrt(d_h)) V per head, query i
keeping the 1024 keys i + off − 1024 < j ≤ i + off, off = t_kv − t_q. The key blocks outside
the window are skipped (`skip_masked_tiles`: both bounds are read off the mask). Python
mirror: python/leantile/architectures/sliding_window_attention.py. -/
def slidingWindowAttentionGraph : Except String Graph :=
  buildGraphWithOutput "sliding_window_attention" [("h", 16), ("t_q", 8192), ("t_kv", 8192), ("d_h", 128)] do
    let q ← input "Q" ["h", "t_q", "d_h"]
    let k ← input "K" ["h", "t_kv", "d_h"]
    let v ← input "V" ["h", "t_kv", "d_h"]
    let scores ← matmul q k "d_h" "d_h"
    let qPos ← iota "t_q"
    let kPos ← iota "t_kv"
    let tkv ← sizeConst "t_kv"
    let tq ← sizeConst "t_q"
    let offset ← sub tkv tq
    let last ← add qPos offset
    let newest ← le kPos last
    let window ← const "1024"
    let oldest ← sub last window
    let recent ← gt kPos oldest
    let keep ← mul newest recent
    let negInf ← const "-inf"
    let masked ← select keep scores negInf
    let dh ← sizeConst "d_h"
    let scale ← sqrt dh
    let s ← div masked scale
    let p ← softmaxSubdag s "t_kv"
    let out ← matmul p v "t_kv" "t_kv"
    pure out

end LeanTile
