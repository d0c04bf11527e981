import LeanTile.Rules.SoftmaxShift
import LeanTile.Rules.OnlineSoftmax

/-!
# End to end: tiled online-softmax attention equals softmax(Q Kᵀ) V

Fix a query row `i` and a value column `e`. The scores are `s_j = Σ_d Q i d * K j d`.
The tiled kernel splits the key axis `t_kv` into tiles — ANY list of tiles whose
concatenation is `0, 1, …, t_kv - 1` — folds the online-softmax state (m, l, o) over
them starting from an arbitrary `m₀`, and returns `o e / l`.
`tiled_attention_eq_softmax`: this equals `Σ_j softmax(s)_j * V j e`.
-/

namespace LeanTile

noncomputable section

/-- Row `i` of Q Kᵀ, contracting the head dimension of size `dh`. -/
def score (Q K : ℕ → ℕ → ℝ) (dh : ℕ) (i j : ℕ) : ℝ :=
  ∑ d ∈ Finset.range dh, Q i d * K j d

/-- softmax(Q Kᵀ) V at row `i`, column `e`, with `tkv` keys. -/
def attention (Q K V : ℕ → ℕ → ℝ) (dh tkv : ℕ) (i e : ℕ) : ℝ :=
  ∑ j ∈ Finset.range tkv, softmax (Finset.range tkv) (score Q K dh i) j * V j e

/-- The keys of one tile for query row `i`: (score, value row). -/
def tileKeys (Q K V : ℕ → ℕ → ℝ) (dh i : ℕ) (tile : List ℕ) : Tile ℕ :=
  tile.map (fun j => (score Q K dh i j, V j))

/-- The tiled kernel: fold online softmax over the tiles, then divide. -/
def tiledAttention (Q K V : ℕ → ℕ → ℝ) (dh : ℕ) (m₀ : ℝ) (tiles : List (List ℕ))
    (i e : ℕ) : ℝ :=
  (run (initState m₀) (tiles.map (tileKeys Q K V dh i))).o e /
    (run (initState m₀) (tiles.map (tileKeys Q K V dh i))).l

theorem attention_eq_ratio (Q K V : ℕ → ℕ → ℝ) (dh tkv i e : ℕ) :
    attention Q K V dh tkv i e =
      (∑ j ∈ Finset.range tkv, Real.exp (score Q K dh i j) * V j e) /
        ∑ j ∈ Finset.range tkv, Real.exp (score Q K dh i j) := by
  unfold attention
  simp only [softmax]
  rw [Finset.sum_div]
  refine Finset.sum_congr rfl (fun j _ => ?_)
  rw [div_mul_eq_mul_div]

/-- **End to end.** For every split of `0..tkv-1` into tiles and every starting `m₀`,
the tiled online-softmax kernel computes softmax(Q Kᵀ) V. -/
theorem tiled_attention_eq_softmax (Q K V : ℕ → ℕ → ℝ) (dh tkv : ℕ) (m₀ : ℝ)
    (tiles : List (List ℕ)) (hsplit : tiles.flatten = List.range tkv) (i e : ℕ) :
    tiledAttention Q K V dh m₀ tiles i e = attention Q K V dh tkv i e := by
  have hkeys : (tiles.map (tileKeys Q K V dh i)).flatten =
      (List.range tkv).map (fun j => (score Q K dh i j, V j)) := by
    rw [← hsplit, ← flatten_map_map]
    all_goals rfl
  unfold tiledAttention
  rw [online_softmax_ratio, hkeys, attention_eq_ratio, List.map_map, List.map_map,
    list_sum_range, list_sum_range]
  all_goals rfl

end

end LeanTile
