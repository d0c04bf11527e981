import LeanTile.Semantics

/-!
# Rule `mean_pullout`

Centering commutes with the contraction up to a rank-one correction:
`Σ_k (x_k − μ)·w_k = Σ_k x_k·w_k − μ·Σ_k w_k` (LayerNorm folded into a GEMM; the
column sums of W are precomputed).
-/

namespace LeanTile

/-- `Σ_k (x k - μ) * w k = Σ_k x k * w k - μ * Σ_k w k`. -/
theorem mean_pullout {ι : Type} (s : Finset ι) (μ : ℝ) (x w : ι → ℝ) :
    ∑ k ∈ s, (x k - μ) * w k = ∑ k ∈ s, x k * w k - μ * ∑ k ∈ s, w k := by
  rw [Finset.mul_sum, ← Finset.sum_sub_distrib]
  refine Finset.sum_congr rfl (fun k _ => ?_)
  ring

end LeanTile
