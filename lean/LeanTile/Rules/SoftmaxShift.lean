import LeanTile.Semantics

/-!
# Rule `softmax_shift`

Subtracting any constant (in practice the row max) from every score before `exp`
leaves softmax unchanged.
-/

namespace LeanTile

noncomputable section

/-- softmax of scores `x` over the index set `s`, at `i`. -/
def softmax {ι : Type} (s : Finset ι) (x : ι → ℝ) (i : ι) : ℝ :=
  Real.exp (x i) / ∑ j ∈ s, Real.exp (x j)

/-- softmax(x - c) = softmax(x) for every constant `c`. -/
theorem softmax_shift_invariant {ι : Type} (s : Finset ι) (x : ι → ℝ) (c : ℝ) (i : ι) :
    softmax s (fun j => x j - c) i = softmax s x i := by
  have hsum : ∑ j ∈ s, Real.exp (x j - c) = Real.exp (-c) * ∑ j ∈ s, Real.exp (x j) := by
    rw [Finset.mul_sum]
    refine Finset.sum_congr rfl (fun j _ => ?_)
    rw [← Real.exp_add]
    congr 1
    ring
  have hi : Real.exp (x i - c) = Real.exp (-c) * Real.exp (x i) := by
    rw [← Real.exp_add]
    congr 1
    ring
  simp only [softmax]
  rw [hsum, hi, mul_div_mul_left _ _ (Real.exp_pos (-c)).ne']

end

end LeanTile
