import LeanTile.Rules.PoolEpilogue

/-!
# Rule `fuse_row_epilogue`

The Python rule `fuse_row_epilogue` (`python/leantile/derive/rules/row_epilogue.py`) computes
reductions over a GEMM's column axis `a`, which one output tile holds whole (a GroupNorm's
channels of a group), and the elementwise nodes after them, in the GEMM kernel's epilogue:
each row's statistics from the tile alone, then the tile's values normalised.

* `RowAgree n a t t' ι`: `t` and `t'` (the graph's product and the CTA's tile) agree at every
  position of `a` through `ι` (`a < n`).
* `sumAlong_update`, `maxAlong_update`: a reduction along `a` is constant along `a`.
* `row_agree_map`: an elementwise map of a tensor and its sum and max along `a` agrees along
  the row wherever the tensor does, so the next round of reductions (a variance of the centred
  values) reads agreeing values again.
* `row_epilogue_eval` (the theorem the rule cites): at a position of the row, the epilogue's
  value, any function of the tile's value and its reductions along `a`, is the graph's.

Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

noncomputable section

/-- `t` and `t'` agree along axis `a` (size `n`) through position `ι`. -/
def RowAgree (n : ℕ) (a : String) (t t' : Tensor) (ι : Idx) : Prop :=
  ∀ k, k < n → t (Function.update ι a k) = t' (Function.update ι a k)

/-- A sum along `a` does not depend on the position along `a`. -/
theorem sumAlong_update (n : ℕ) (a : String) (t : Tensor) (ι : Idx) (k : ℕ) :
    sumAlong n a t (Function.update ι a k) = sumAlong n a t ι := by
  show ∑ j ∈ Finset.range n, t (Function.update (Function.update ι a k) a j) =
    ∑ j ∈ Finset.range n, t (Function.update ι a j)
  simp only [Function.update_idem]

/-- A max along `a` does not depend on the position along `a`. -/
theorem maxAlong_update (n : ℕ) (a : String) (t : Tensor) (ι : Idx) (k : ℕ) :
    maxAlong n a t (Function.update ι a k) = maxAlong n a t ι := by
  show (List.range n).foldl (fun m j => max m (t (Function.update (Function.update ι a k) a j)))
      (t (Function.update (Function.update ι a k) a 0)) =
    (List.range n).foldl (fun m j => max m (t (Function.update ι a j))) (t (Function.update ι a 0))
  simp only [Function.update_idem]

/-- An elementwise map of a tensor, its sum and its max along `a` agrees along the row where
the tensor does (the operand of the next round of reductions). -/
theorem row_agree_map (n : ℕ) (hn : 0 < n) (a : String) (t t' : Tensor) (ι : Idx)
    (h : RowAgree n a t t' ι) (f : ℝ → ℝ → ℝ → ℝ) :
    RowAgree n a (fun κ => f (t κ) (sumAlong n a t κ) (maxAlong n a t κ))
      (fun κ => f (t' κ) (sumAlong n a t' κ) (maxAlong n a t' κ)) ι := by
  unfold RowAgree
  intro k hk
  show f (t (Function.update ι a k)) (sumAlong n a t (Function.update ι a k))
      (maxAlong n a t (Function.update ι a k)) =
    f (t' (Function.update ι a k)) (sumAlong n a t' (Function.update ι a k))
      (maxAlong n a t' (Function.update ι a k))
  rw [sumAlong_update, sumAlong_update, maxAlong_update, maxAlong_update, h k hk,
    sumAlong_local n a t t' ι h, maxAlong_local n hn a t t' ι h]

/-- `fuse_row_epilogue`: where the tile `t'` agrees with the graph's product `t` along the row
through `ι` (`ι a < n`: a position of the row), any function of the value and its sum and max
along `a` is the graph's there. -/
theorem row_epilogue_eval (n : ℕ) (hn : 0 < n) (a : String) (t t' : Tensor) (ι : Idx)
    (h : RowAgree n a t t' ι) (hι : ι a < n) (f : ℝ → ℝ → ℝ → ℝ) :
    f (t ι) (sumAlong n a t ι) (maxAlong n a t ι) = f (t' ι) (sumAlong n a t' ι) (maxAlong n a t' ι) := by
  have h0 : t ι = t' ι := by
    have := h (ι a) hι
    rwa [Function.update_eq_self] at this
  rw [h0, sumAlong_local n a t t' ι h, maxAlong_local n hn a t t' ι h]

end

end LeanTile
