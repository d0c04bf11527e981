import LeanTile.DagM

namespace LeanTile
open DSL

/-- Causal attention: softmax(mask(Q Kᵀ) / sqrt(d_h)) V per head, query i keeping keys
j ≤ i + (t_kv − t_q) (aligned at the last key, as a KV cache has it). The mask writes −∞
(`exp(−∞) = 0`) before the scale, so the scale still folds into the exp2 multiplier; the key
blocks above the diagonal are skipped (`skip_masked_tiles`). Python mirror:
python/leantile/architectures/causal_attention.py. -/
def causalAttentionGraph : Except String Graph :=
  buildGraphWithOutput "causal_attention" [("h", 16), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128)] do
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
    let keep ← le kPos last
    let negInf ← const "-inf"
    let masked ← select keep scores negInf
    let dh ← sizeConst "d_h"
    let scale ← sqrt dh
    let s ← div masked scale
    let p ← softmaxSubdag s "t_kv"
    let out ← matmul p v "t_kv" "t_kv"
    pure out

end LeanTile
