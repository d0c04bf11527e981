import LeanTile.Rules.Common

/-!
# Rule `dual_gemm`

Two contractions of one LHS over the same axis (`X W₁` and `X W₂`) computed in ONE
loop over `k` give the pair of the two products: the fused loop carries a pair
accumulator and reads `x k` once per step.
-/

namespace LeanTile

/-- One step of a single dot-product loop. -/
def dotStep (x w : ℕ → ℝ) (acc : ℝ) (k : ℕ) : ℝ := acc + x k * w k

/-- One step of the fused loop: both accumulators advance, `x k` is read once. -/
def dualStep (x w₁ w₂ : ℕ → ℝ) (acc : ℝ × ℝ) (k : ℕ) : ℝ × ℝ :=
  (acc.1 + x k * w₁ k, acc.2 + x k * w₂ k)

theorem dual_fold_pair (x w₁ w₂ : ℕ → ℝ) (ks : List ℕ) (a b : ℝ) :
    ks.foldl (dualStep x w₁ w₂) (a, b) = (ks.foldl (dotStep x w₁) a, ks.foldl (dotStep x w₂) b) := by
  induction ks generalizing a b with
  | nil => rfl
  | cons k ks ih =>
    simp only [List.foldl_cons]
    exact ih (a + x k * w₁ k) (b + x k * w₂ k)

/-- **Dual GEMM.** The fused loop over `ks` (from `(0, 0)`) yields the pair of the two
single loops. -/
theorem dual_gemm_shared_lhs (x w₁ w₂ : ℕ → ℝ) (ks : List ℕ) :
    ks.foldl (dualStep x w₁ w₂) (0, 0) = (ks.foldl (dotStep x w₁) 0, ks.foldl (dotStep x w₂) 0) :=
  dual_fold_pair x w₁ w₂ ks 0 0

/-- A single loop computes the dot product. -/
theorem dotStep_foldl (x w : ℕ → ℝ) (ks : List ℕ) (a : ℝ) :
    ks.foldl (dotStep x w) a = a + (ks.map (fun k => x k * w k)).sum := by
  induction ks generalizing a with
  | nil => simp only [List.foldl_nil, List.map_nil, List.sum_nil, add_zero]
  | cons k ks ih =>
    rw [List.foldl_cons, ih, List.map_cons, List.sum_cons, dotStep, add_assoc]

/-- Over `k < n` the fused loop gives the two contractions as `Finset` sums. -/
theorem dual_gemm_range (x w₁ w₂ : ℕ → ℝ) (n : ℕ) :
    (List.range n).foldl (dualStep x w₁ w₂) (0, 0) =
      (∑ k ∈ Finset.range n, x k * w₁ k, ∑ k ∈ Finset.range n, x k * w₂ k) := by
  rw [dual_gemm_shared_lhs, dotStep_foldl, dotStep_foldl, zero_add, zero_add,
    list_sum_range, list_sum_range]

end LeanTile
