import LeanTile.Semantics

/-!
# Affine norms folded into a GEMM

A norm's per-feature gain `γ` (RMSNorm, LayerNorm with `elementwise_affine`) multiplies the
GEMM's LHS along the contracted axis `k`; folding it into the weights instead (row `k` of `W`
scaled by `γ k`, once, offline) gives the same product: `Σ_k (x_k·γ_k)·w_kj = Σ_k x_k·(γ_k·w_kj)`.
A per-feature bias `β` added before the GEMM becomes a constant row vector added after it:
`Σ_k (x_k + β_k)·w_kj = Σ_k x_k·w_kj + Σ_k β_k·w_kj` (the second sum, `βᵀW`, is precomputed).

No rule of the Python rule table cites these yet; they state the algebra a gain/bias fold
relies on. Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

/-- **Gain fold.** `Σ_k (x k * γ k) * w k j = Σ_k x k * (γ k * w k j)`: the gain moves from
the activations into the rows of the weight matrix. -/
theorem gain_fold {ι κ : Type} (s : Finset ι) (x γ : ι → ℝ) (w : ι → κ → ℝ) (j : κ) :
    ∑ k ∈ s, (x k * γ k) * w k j = ∑ k ∈ s, x k * (γ k * w k j) :=
  Finset.sum_congr rfl (fun k _ => mul_assoc (x k) (γ k) (w k j))

/-- **Bias through W.** `Σ_k (x k + β k) * w k j = Σ_k x k * w k j + Σ_k β k * w k j`: a bias
before the GEMM is the GEMM plus the constant row `βᵀW`. -/
theorem bias_fold {ι κ : Type} (s : Finset ι) (x β : ι → ℝ) (w : ι → κ → ℝ) (j : κ) :
    ∑ k ∈ s, (x k + β k) * w k j = ∑ k ∈ s, x k * w k j + ∑ k ∈ s, β k * w k j := by
  rw [← Finset.sum_add_distrib]
  exact Finset.sum_congr rfl (fun k _ => add_mul (x k) (β k) (w k j))

/-- Both at once (LayerNorm's affine `γ·x̂ + β` before a GEMM): the gain folds into `W`, the
bias becomes `βᵀW`. -/
theorem affine_fold {ι κ : Type} (s : Finset ι) (x γ β : ι → ℝ) (w : ι → κ → ℝ) (j : κ) :
    ∑ k ∈ s, (x k * γ k + β k) * w k j =
      ∑ k ∈ s, x k * (γ k * w k j) + ∑ k ∈ s, β k * w k j := by
  -- the right side back to one sum of (x γ + β) w, term by term (no rewriting under a lambda)
  rw [← gain_fold s x γ w j, ← Finset.sum_add_distrib]
  exact Finset.sum_congr rfl (fun k _ => add_mul (x k * γ k) (β k) (w k j))

end LeanTile
