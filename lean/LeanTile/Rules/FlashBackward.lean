import LeanTile.Rules.OnlineSoftmax
import LeanTile.Rules.StreamStats

/-!
# Rule `flash_backward`

The Python rule `flash_backward` (`python/leantile/derive/rules/flash_backward.py`) runs
attention's backward, as reverse mode writes it (`P` the softmax of the scores, `dP = dO Vᵀ`,
`D = Σ_t dP P`, `dS = P (dP - D)`, `dQ = dS K`, `dK = dSᵀ Q`, `dV = Pᵀ dO`), in three kernels that
hold every `[t_q, t_kv]` value on chip, one block at a time:

* `flash_backward_blocks` (the theorem the rule cites): a contraction over the streamed axis
  (dQ over the keys, dK and dV over the queries), accumulated block by block from 0 over any
  cover of the axis by blocks, is the whole contraction (from `sum_split_range_foldl`).
* `softmax_eq_exp_div_sum`: `exp(s_i - m) / Σ_j exp(s_j - m)` is the softmax for any `m`: the
  dQ and dK/dV kernels recompute `P` from the row's stored max and sum.
* `flash_backward_row_term`: the statistics kernel folds `D` as online softmax folds `o`, with
  `dP` for the values: `o / l` is `Σ exp(s) dP / Σ exp(s) = Σ_t P dP` (`online_softmax_ratio`
  at one value column).

Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

noncomputable section

/-- **Blocks of a backward product.** A contraction over `n` positions, accumulated from 0 block
by block over any list of blocks covering `0..n-1` in order, is the whole contraction. -/
theorem flash_backward_blocks (ds k : ℕ → ℝ) (n : ℕ) (blocks : List (List ℕ))
    (h : blocks.flatten = List.range n) :
    ∑ j ∈ Finset.range n, ds j * k j =
      blocks.foldl (fun acc b => acc + (b.map (fun j => ds j * k j)).sum) 0 :=
  sum_split_range_foldl (fun j => ds j * k j) n blocks h

/-- **P from the stored statistics.** Shifting every score by the same `m` leaves the softmax
unchanged: `exp(s_i - m) / Σ_j exp(s_j - m) = exp(s_i) / Σ_j exp(s_j)`. -/
theorem softmax_eq_exp_div_sum (s : ℕ → ℝ) (n : ℕ) (m : ℝ) (i : ℕ) :
    Real.exp (s i - m) / ∑ j ∈ Finset.range n, Real.exp (s j - m) =
      Real.exp (s i) / ∑ j ∈ Finset.range n, Real.exp (s j) := by
  have hm : ∀ x : ℝ, Real.exp (x - m) = Real.exp x * Real.exp (-m) := fun x => by
    rw [sub_eq_add_neg, Real.exp_add]
  simp only [hm]
  rw [← Finset.sum_mul, mul_div_mul_right _ _ (Real.exp_pos (-m)).ne']

/-- **D online.** The online softmax fold with `dP` as the one value column: `o / l` is the
softmax-weighted sum of `dP`, whatever the running max was. -/
theorem flash_backward_row_term (m₀ : ℝ) (tiles : List (Tile Unit)) :
    (run (initState m₀) tiles).o () / (run (initState m₀) tiles).l =
      (tiles.flatten.map (fun p => Real.exp p.1 * p.2 ())).sum /
        (tiles.flatten.map (fun p => Real.exp p.1)).sum :=
  online_softmax_ratio m₀ tiles ()

end

end LeanTile
