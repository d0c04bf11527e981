import LeanTile.Semantics

/-!
# Rule `exp_to_exp2`

`exp x = 2 ^ (x · log₂ e)` (real power), with `log₂ e = 1 / log 2`. GPUs have a fast
`exp2`; the rule folds `log₂ e` into the scale that already multiplies the scores.
-/

namespace LeanTile

noncomputable section

/-- log₂ e = 1 / ln 2. -/
def log2e : ℝ := 1 / Real.log 2

theorem log2e_eq_logb : log2e = Real.logb 2 (Real.exp 1) := by
  first
    | (unfold log2e Real.logb; rw [Real.log_exp])
    | (simp only [log2e, Real.logb, Real.log_exp])

/-- `Real.exp x = 2 ^ (x * log2e)` with real power (`Real.rpow`). -/
theorem exp_eq_exp2_mul_log2e (x : ℝ) : Real.exp x = (2 : ℝ) ^ (x * log2e) := by
  have h2 : (0 : ℝ) < 2 := by norm_num
  have hlog : Real.log 2 ≠ 0 := (Real.log_pos (by norm_num : (1 : ℝ) < 2)).ne'
  have hx : Real.log 2 * (x * log2e) = x := by
    unfold log2e
    first
      | (field_simp; done)
      | (rw [mul_comm x, ← mul_assoc, mul_one_div_cancel hlog, one_mul])
  rw [Real.rpow_def_of_pos h2, hx]

/-- The same identity read through the graph semantics: the `exp` op equals the
`exp2` op applied to `x * log2e`. -/
theorem exp_op_eq_exp2_op (x : ℝ) : UnOp.eval .exp x = UnOp.eval .exp2 (x * log2e) :=
  exp_eq_exp2_mul_log2e x

end

end LeanTile
