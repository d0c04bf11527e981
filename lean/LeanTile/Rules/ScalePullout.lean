import LeanTile.Semantics

/-!
# Rule `scale_pullout`

A per-row scale commutes with the contraction: `Σ_k (s·x_k)·w_k = s·Σ_k x_k·w_k`.
RMSNorm's `x · rsqrt(...)` can therefore be applied in the GEMM epilogue.
-/

namespace LeanTile

/-- `Σ_k (s * x k) * w k = s * Σ_k x k * w k`. -/
theorem scale_pullout {ι : Type} (s : Finset ι) (c : ℝ) (x w : ι → ℝ) :
    ∑ k ∈ s, (c * x k) * w k = c * ∑ k ∈ s, x k * w k := by
  rw [Finset.mul_sum]
  refine Finset.sum_congr rfl (fun k _ => ?_)
  ring

/-- The form the graph has (`mul(x, r)` puts the row scale second). -/
theorem scale_pullout_right {ι : Type} (s : Finset ι) (c : ℝ) (x w : ι → ℝ) :
    ∑ k ∈ s, (x k * c) * w k = c * ∑ k ∈ s, x k * w k := by
  rw [Finset.mul_sum]
  refine Finset.sum_congr rfl (fun k _ => ?_)
  ring

end LeanTile
