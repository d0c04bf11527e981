import LeanTile.Rules.Common

/-!
# Rule `flatten_reduction`

The Python rule `flatten_reduction` (`python/leantile/derive/rules/flatten.py`) merges axes
`a₁ … aₖ` that lie next to each other, in that order, in every tensor that has any of them, into
one axis of `|a₁| ⋯ |aₖ|` elements (a row-major view of the same memory), and replaces a run of
nested reductions of one kind over them (`Σ_{a₁} … Σ_{aₖ}`, in any order) by ONE reduction over
the merged axis. Two parts suffice (a merge of k parts is k − 1 merges of two):

* `flat_index`: the row-major position of `(i, j)` in `Fin (m * n)` is `j + n * i`
  (Mathlib's `finProdFinEquiv`, the index a view `[.., m, n, ..] → [.., m n, ..]` uses).
* `sum_fin_prod` (the theorem the rule cites): a sum over the merged axis is the nested sum over
  its parts, at the row-major positions.
* `sum_fin_prod_comm`: and in the other nesting order (the graph may reduce the inner part first
  or the outer one: both are the merged sum).
* `max_fin_prod`: the same for a max, over `WithBot ℝ` (⊥ the −∞ a kernel starts a max from, the
  max of an empty axis), as `split_reduction_max` states maxima.

A tensor over the merged axis holds at position `j + n i` what the graph's tensor holds at
`(i, j)` (the view), so every elementwise node commutes with the merge pointwise
(`fuse_elementwise_eval` applies to the merged graph unchanged) and a reduction run over the
parts equals the merged reduction by the lemmas here.

Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

open Finset

/-- The row-major position: part `i` of `m`, then part `j` of `n`, is `j + n * i` (the second
part fastest, as in the user's contiguous tensor). `finProdFinEquiv` is defined by this value. -/
theorem flat_index {m n : ℕ} (i : Fin m) (j : Fin n) :
    ((finProdFinEquiv (i, j) : Fin (m * n)) : ℕ) = j + n * i := by
  first
    | rfl
    | simp [finProdFinEquiv_apply_val]

/-- **Flatten (sum).** The sum over the merged axis `Fin (m * n)` is the nested sum over its
parts at their row-major positions. -/
theorem sum_fin_prod (m n : ℕ) (f : Fin (m * n) → ℝ) :
    ∑ k, f k = ∑ i : Fin m, ∑ j : Fin n, f (finProdFinEquiv (i, j)) :=
  calc ∑ k, f k = ∑ p : Fin m × Fin n, f (finProdFinEquiv p) := (Equiv.sum_comp finProdFinEquiv f).symm
    _ = ∑ i : Fin m, ∑ j : Fin n, f (finProdFinEquiv (i, j)) := Fintype.sum_prod_type _

/-- The other nesting order (the outer part reduced first) is the same merged sum. -/
theorem sum_fin_prod_comm (m n : ℕ) (f : Fin (m * n) → ℝ) :
    ∑ k, f k = ∑ j : Fin n, ∑ i : Fin m, f (finProdFinEquiv (i, j)) :=
  (sum_fin_prod m n f).trans Finset.sum_comm

/-- **Flatten (max).** The max over the merged axis is the nested max over its parts (over
`WithBot ℝ`: `⊥` is the max of nothing). -/
theorem max_fin_prod (m n : ℕ) (f : Fin (m * n) → WithBot ℝ) :
    univ.sup f = univ.sup (fun i : Fin m => univ.sup (fun j : Fin n => f (finProdFinEquiv (i, j)))) := by
  apply le_antisymm
  · refine Finset.sup_le fun k _ => ?_
    obtain ⟨⟨i, j⟩, rfl⟩ := finProdFinEquiv.surjective k
    exact le_trans (Finset.le_sup (f := fun j => f (finProdFinEquiv (i, j))) (Finset.mem_univ j))
      (Finset.le_sup (f := fun i => univ.sup (fun j : Fin n => f (finProdFinEquiv (i, j)))) (Finset.mem_univ i))
  · exact Finset.sup_le fun i _ => Finset.sup_le fun j _ => Finset.le_sup (Finset.mem_univ _)

/-! ## Rule `merge_gemm_axes`

A plain matmul (no batch axis) whose rows span two adjacent axes of its LHS (activations
`X[b, t, k]`) or whose columns span two of its weight's (`W[k, h, d]`), which no node reduces,
contracts, batches over or indexes apart, is ONE matmul over their merged axis of a row-major view
(`python/leantile/derive/rules/flatten.py`, `find_free_merge`). A matmul's free axes are pointwise:
its value at a row is the contraction of that row alone, so viewing the rows `(i, j)` as one index
`finProdFinEquiv (i, j)` changes nothing but the index (columns alike, by symmetry of the
statement). Every other node that holds the axes is elementwise in them (the rule refuses any that
is not), so `fuse_elementwise_eval` applies to the merged graph unchanged. -/

/-- **Merge (matmul rows).** The product of the LHS viewed over the merged rows, at the merged
index of `(i, j)`, is the product of the LHS at `(i, j)`: the contraction never reads another row. -/
theorem matmul_rows_reindex {m n K N : ℕ} (A : Fin m → Fin n → Fin K → ℝ) (B : Fin K → Fin N → ℝ)
    (i : Fin m) (j : Fin n) (c : Fin N) :
    (fun (r : Fin (m * n)) (c' : Fin N) =>
        ∑ k, A (finProdFinEquiv.symm r).1 (finProdFinEquiv.symm r).2 k * B k c') (finProdFinEquiv (i, j)) c
      = ∑ k, A i j k * B k c := by
  simp

/-- **Merge (matmul columns).** Likewise for the weight's columns viewed over a merged axis. -/
theorem matmul_cols_reindex {M K m n : ℕ} (A : Fin M → Fin K → ℝ) (B : Fin K → Fin m → Fin n → ℝ)
    (r : Fin M) (i : Fin m) (j : Fin n) :
    (fun (r' : Fin M) (c : Fin (m * n)) =>
        ∑ k, A r' k * B k (finProdFinEquiv.symm c).1 (finProdFinEquiv.symm c).2) r (finProdFinEquiv (i, j))
      = ∑ k, A r k * B k i j := by
  simp

end LeanTile
