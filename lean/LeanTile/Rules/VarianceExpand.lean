import LeanTile.Semantics

/-!
# Rule `variance_expand`

A sum of squared deviations from a constant expands into sums that stream with the
GEMM: `Σ_k (x_k − μ)² = Σ_k x_k² − 2μ·Σ_k x_k + n·μ²` (n = number of terms).

The kernels stream sums shifted by a pivot `p` (the row's first element) instead, and the rule
cites `sum_sq_sub_pivot`: `Σ_k (x_k − μ)² = Σ_k (x_k − p)² − 2(μ − p)·Σ_k (x_k − p) + n·(μ − p)²`.
Over ℝ both are identities; in float32 the unshifted sums are of size n·μ² and cancel to
n·σ² (relative error 4.5e-2 at μ = 1000, σ = 1, NaN rows at μ = 3000), while the shifted ones
are of size n·σ², so nothing cancels.
-/

namespace LeanTile

/-- `Σ_k (x k - μ)^2 = Σ_k x k^2 - 2 μ Σ_k x k + |s| μ^2`. -/
theorem sum_sq_sub_const {ι : Type} (s : Finset ι) (μ : ℝ) (x : ι → ℝ) :
    ∑ k ∈ s, (x k - μ) ^ 2 = ∑ k ∈ s, x k ^ 2 - 2 * μ * ∑ k ∈ s, x k + (s.card : ℝ) * μ ^ 2 := by
  have h : ∀ k ∈ s, (x k - μ) ^ 2 = x k ^ 2 - 2 * μ * x k + μ ^ 2 := fun k _ => by ring
  rw [Finset.sum_congr rfl h]
  first
    | (rw [Finset.sum_add_distrib, Finset.sum_sub_distrib, Finset.sum_const, nsmul_eq_mul,
        Finset.mul_sum]; done)
    | (simp only [Finset.sum_add_distrib, Finset.sum_sub_distrib, Finset.sum_const, nsmul_eq_mul,
        Finset.mul_sum]; done)
    | (simp only [Finset.sum_add_distrib, Finset.sum_sub_distrib, Finset.sum_const, nsmul_eq_mul,
        ← Finset.mul_sum] <;> ring)
    -- Branches without `nsmul_eq_mul` (issue 13 hardening; unchecked, no toolchain here):
    -- (a) count the `μ ^ 2` terms as `Σ_{k ∈ s} 1` instead of `s.card • μ ^ 2`.
    | (rw [Finset.sum_add_distrib, Finset.sum_sub_distrib, ← Finset.mul_sum,
        Finset.card_eq_sum_ones, Nat.cast_sum, Finset.sum_mul]
       simp only [Nat.cast_one, one_mul]
       done)
    -- (b) let the default simp set turn `Finset.sum_const` into a product, whatever the
    --     nsmul/cast lemma is called in the pinned Mathlib.
    | (simp [Finset.sum_add_distrib, Finset.sum_sub_distrib, ← Finset.mul_sum] <;> ring)

/-- The pivoted form the kernels compute, for any `p` (constant along `k`):
`Σ_k (x k - μ)^2 = Σ_k (x k - p)^2 - 2 (μ - p) Σ_k (x k - p) + |s| (μ - p)^2`.
It is `sum_sq_sub_const` for the shifted values `x k - p` and the shifted centre `μ - p`. -/
theorem sum_sq_sub_pivot {ι : Type} (s : Finset ι) (μ p : ℝ) (x : ι → ℝ) :
    ∑ k ∈ s, (x k - μ) ^ 2
      = ∑ k ∈ s, (x k - p) ^ 2 - 2 * (μ - p) * ∑ k ∈ s, (x k - p) + (s.card : ℝ) * (μ - p) ^ 2 := by
  have h : ∀ k ∈ s, (x k - μ) ^ 2 = ((x k - p) - (μ - p)) ^ 2 := fun k _ => by ring
  rw [Finset.sum_congr rfl h]
  first
    | exact sum_sq_sub_const s (μ - p) (fun k => x k - p)
    | (have e := sum_sq_sub_const s (μ - p) (fun k => x k - p)
       simp only at e
       exact e)
    | simpa using sum_sq_sub_const s (μ - p) (fun k => x k - p)

/-- **Split slices, each with its own pivot** (a streamed row split over CTAs: each slice pivots
on its first element `p j` and streams the elements of `S j`; the combine shifts each slice's sums
by the mean over the slice's own elements, `(S j).card`, and adds them). For disjoint slices
covering the row, the slices' pivoted expressions add up to the whole row's sum of squared
deviations. (`Finset.sum_biUnion` splits the sum over the union; `sum_sq_sub_pivot` is each term.) -/
theorem sum_sq_sub_pivot_slices {ι κ : Type} [DecidableEq ι] (J : Finset κ) (S : κ → Finset ι)
    (hdisj : (↑J : Set κ).PairwiseDisjoint S) (μ : ℝ) (p : κ → ℝ) (x : ι → ℝ) :
    ∑ k ∈ J.biUnion S, (x k - μ) ^ 2
      = ∑ j ∈ J, (∑ k ∈ S j, (x k - p j) ^ 2 - 2 * (μ - p j) * ∑ k ∈ S j, (x k - p j)
          + ((S j).card : ℝ) * (μ - p j) ^ 2) := by
  rw [Finset.sum_biUnion hdisj]
  exact Finset.sum_congr rfl fun j _ => sum_sq_sub_pivot (S j) μ (p j) x

end LeanTile
