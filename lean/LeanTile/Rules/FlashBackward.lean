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
  at one value column), where no output is handed over.
* `attention_row_term`: `Σ_t P_t (dO Vᵀ)_t = Σ_j dO_j (P V)_j`: where the forward's output is
  handed over, reverse mode writes `D = rowsum(dO O)` (`leantile.autodiff`).

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

/-- **Attention's row term from its output.** With `dP = dO Vᵀ` and `O = P V`,
`Σ_t P_t dP_t = Σ_j dO_j O_j`: the two sums commute. Reverse mode (`leantile.autodiff`, the
softmax's closed-form cotangent) writes the row term so where the forward hands `O` over, and
the backward reads two `[t_q, d]` tensors instead of a pass over the keys. -/
theorem attention_row_term (P : ℕ → ℝ) (V : ℕ → ℕ → ℝ) (dO : ℕ → ℝ) (n d : ℕ) :
    ∑ t ∈ Finset.range n, P t * (∑ j ∈ Finset.range d, dO j * V t j) =
      ∑ j ∈ Finset.range d, dO j * (∑ t ∈ Finset.range n, P t * V t j) := by
  simp only [Finset.mul_sum]
  rw [Finset.sum_comm]
  apply Finset.sum_congr rfl
  intro j _
  apply Finset.sum_congr rfl
  intro t _
  ring

end

end LeanTile
