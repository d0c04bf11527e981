import LeanTile.Semantics

/-!
# LeanTile.Vjp — the derivative identities behind reverse mode

These are the derivative identities of the `vjp` column of `python/leantile/ir/ops.py` (the
`_VJPS` table) and of the structural rules of `leantile.autodiff` (sums, broadcasts,
contractions). Each unary theorem `vjp_<op>` states `HasDerivAt (UnOp.eval .<op>) D x` with `D`
written the way the Python rule writes the factor that multiplies `dy`, in terms of `x` and of the
result `y = UnOp.eval .<op> x` (e.g. `rsqrt`: `y * (y * y) * (-1/2)`; `sigmoid`: `y * (1 - y)`),
so the rule `dx = dy * D` is the chain rule. Binary ops are stated one argument at a time. The
structural identities are the adjoint equations `⟨dY, f X⟩ = ⟨f* dY, X⟩` over finite sums.

**Nothing here has been checked by Lean**: the file was written where no Lean toolchain could
run. Every Mathlib name was looked up in the Mathlib sources first, but until `lake build`
compiles it the theorems are unchecked.

Where the function is not differentiable the Python rules make a choice, as torch does; these
are conventions, not theorems, and nothing below states them:
* `max`/`min` at a tie `a = b` split the gradient evenly, 1/2 to each operand (torch's
  `maximum`/`minimum`); away from ties the theorems `vjp_max_*`, `vjp_min_*` apply;
* `abs` at `0` gets gradient `0` (torch's `sgn`); `vjp_abs` assumes `x ≠ 0`;
* a `max` reduction (`amax`) shares the gradient evenly among the positions equal to the max;
* comparisons and a `select`'s condition get no gradient (they are piecewise constant).
Precision is not modelled: everything is exact real arithmetic.
-/

namespace LeanTile

-- Helpers ------------------------------------------------------------------------------------

/-- `tanh' = 1 - tanh²`, by the quotient rule on `sinh / cosh` (Mathlib has `sinh'` and `cosh'`;
we found no `HasDerivAt` lemma for `Real.tanh`). -/
theorem tanh_hasDerivAt (x : ℝ) :
    HasDerivAt Real.tanh (1 - Real.tanh x * Real.tanh x) x := by
  have hc : Real.cosh x ≠ 0 := (Real.cosh_pos x).ne'
  have hfun : Real.tanh = fun y => Real.sinh y / Real.cosh y :=
    funext fun y => Real.tanh_eq_sinh_div_cosh y
  have h : HasDerivAt Real.tanh
      ((Real.cosh x * Real.cosh x - Real.sinh x * Real.sinh x) / Real.cosh x ^ 2) x := by
    rw [hfun]
    first
      | exact (Real.hasDerivAt_sinh x).div (Real.hasDerivAt_cosh x) hc
      | exact ((Real.hasDerivAt_sinh x).div (Real.hasDerivAt_cosh x) hc).congr_deriv (by ring1)
  refine h.congr_deriv ?_
  rw [Real.tanh_eq_sinh_div_cosh x]
  first
    | (field_simp; done)
    | (field_simp; ring1)
    | (rw [div_mul_div_comm, one_sub_div (mul_ne_zero hc hc), sq])

/-- The chain rule through `tanh`. -/
theorem tanh_comp_hasDerivAt {f : ℝ → ℝ} {f' x : ℝ} (hf : HasDerivAt f f' x) :
    HasDerivAt (fun y => Real.tanh (f y)) ((1 - Real.tanh (f x) * Real.tanh (f x)) * f') x :=
  (tanh_hasDerivAt (f x)).comp x hf

/-- `1 + exp(-x)`, the denominator of `sigmoid` and `silu`, has derivative `exp(-x) * (-1)`. -/
theorem one_add_exp_neg_hasDerivAt (x : ℝ) :
    HasDerivAt (fun y : ℝ => 1 + Real.exp (-y)) (Real.exp (-x) * -1) x := by
  first
    | exact ((hasDerivAt_neg x).exp).const_add 1
    | exact (((hasDerivAt_neg x).exp).const_add 1).congr_deriv (by ring1)
    | exact ((hasDerivAt_neg' x).exp).const_add 1
    | exact (((hasDerivAt_id' x).neg).exp).const_add 1

-- Unary ops ----------------------------------------------------------------------------------

/-- `exp`: the vjp `dy * y` (`_VJPS["exp"]`). -/
theorem vjp_exp (x : ℝ) : HasDerivAt (UnOp.eval .exp) (UnOp.eval .exp x) x := by
  show HasDerivAt (fun y : ℝ => Real.exp y) (Real.exp x) x
  exact Real.hasDerivAt_exp x

/-- `exp2`: the vjp `dy * (y * log 2)` (`_VJPS["exp2"]`). -/
theorem vjp_exp2 (x : ℝ) :
    HasDerivAt (UnOp.eval .exp2) (UnOp.eval .exp2 x * Real.log 2) x := by
  show HasDerivAt (fun y : ℝ => (2 : ℝ) ^ y) ((2 : ℝ) ^ x * Real.log 2) x
  exact (Real.hasStrictDerivAt_const_rpow (by norm_num : (0 : ℝ) < 2) x).hasDerivAt

/-- `neg`: the vjp `-dy` (`_VJPS["neg"]`). -/
theorem vjp_neg (x : ℝ) : HasDerivAt (UnOp.eval .neg) (-1) x := by
  show HasDerivAt (fun y : ℝ => -y) (-1) x
  first
    | exact hasDerivAt_neg' x
    | exact hasDerivAt_neg x
    | exact ((hasDerivAt_id' x).neg).congr_deriv rfl

/-- `square`: the vjp `dy * (x * 2)` (`_VJPS["square"]`). -/
theorem vjp_square (x : ℝ) : HasDerivAt (UnOp.eval .square) (x * 2) x := by
  show HasDerivAt (fun y : ℝ => y * y) (x * 2) x
  have h : HasDerivAt (fun y : ℝ => y * y) _ x := (hasDerivAt_id' x).mul (hasDerivAt_id' x)
  exact h.congr_deriv (by ring)

/-- `sqrt`: the vjp `dy / (y * 2)` (`_VJPS["sqrt"]`), for `0 < x`. -/
theorem vjp_sqrt (x : ℝ) (hx : 0 < x) :
    HasDerivAt (UnOp.eval .sqrt) (1 / (UnOp.eval .sqrt x * 2)) x := by
  show HasDerivAt (fun y : ℝ => Real.sqrt y) (1 / (Real.sqrt x * 2)) x
  have h : HasDerivAt (fun y : ℝ => Real.sqrt y) _ x := Real.hasDerivAt_sqrt hx.ne'
  exact h.congr_deriv (by first | ring1 | (field_simp; done) | (field_simp; ring1))

/-- `rsqrt`: the vjp `dy * ((y * (y * y)) * -0.5)`, i.e. `d/dx x^(-1/2) = -1/2 · y³`
(`_VJPS["rsqrt"]`), for `0 < x`. -/
theorem vjp_rsqrt (x : ℝ) (hx : 0 < x) :
    HasDerivAt (UnOp.eval .rsqrt)
      (UnOp.eval .rsqrt x * (UnOp.eval .rsqrt x * UnOp.eval .rsqrt x) * (-1 / 2)) x := by
  show HasDerivAt (fun y : ℝ => 1 / Real.sqrt y)
    (1 / Real.sqrt x * (1 / Real.sqrt x * (1 / Real.sqrt x)) * (-1 / 2)) x
  have hs : Real.sqrt x ≠ 0 := (Real.sqrt_pos.2 hx).ne'
  have hd : HasDerivAt (fun y : ℝ => Real.sqrt y) _ x := Real.hasDerivAt_sqrt hx.ne'
  have h : HasDerivAt (fun y : ℝ => 1 / Real.sqrt y) _ x :=
    (hasDerivAt_const x (1 : ℝ)).div hd hs
  exact h.congr_deriv (by first | ring1 | (field_simp; ring1) | (field_simp; done))

/-- `recip`: the vjp `-(dy * (y * y))` (`_VJPS["recip"]`), for `x ≠ 0`. -/
theorem vjp_recip (x : ℝ) (hx : x ≠ 0) :
    HasDerivAt (UnOp.eval .recip) (-(UnOp.eval .recip x * UnOp.eval .recip x)) x := by
  show HasDerivAt (fun y : ℝ => 1 / y) (-(1 / x * (1 / x))) x
  have h : HasDerivAt (fun y : ℝ => 1 / y) _ x :=
    (hasDerivAt_const x (1 : ℝ)).div (hasDerivAt_id' x) hx
  exact h.congr_deriv (by first | ring1 | (field_simp; ring1) | (field_simp; done))

/-- `silu`: the vjp `dy * (s * (1 + x * (1 - s)))` with `s = sigmoid x` (`_silu_vjp`). -/
theorem vjp_silu (x : ℝ) :
    HasDerivAt (UnOp.eval .silu)
      (UnOp.eval .sigmoid x * (1 + x * (1 - UnOp.eval .sigmoid x))) x := by
  show HasDerivAt (fun y : ℝ => y / (1 + Real.exp (-y)))
    (1 / (1 + Real.exp (-x)) * (1 + x * (1 - 1 / (1 + Real.exp (-x))))) x
  have hne : (1 : ℝ) + Real.exp (-x) ≠ 0 := by
    first
      | exact (add_pos one_pos (Real.exp_pos (-x))).ne'
      | positivity
  have h : HasDerivAt (fun y : ℝ => y / (1 + Real.exp (-y))) _ x :=
    (hasDerivAt_id' x).div (one_add_exp_neg_hasDerivAt x) hne
  exact h.congr_deriv (by
    first
      | (field_simp; ring1)
      | (field_simp; done)
      | (field_simp [hne]; ring1))

/-- `gelu_tanh`: the vjp of `_gelu_tanh_vjp`, `dy * (left + right)` with
`t = tanh((x * (x² · 0.044715 + 1)) * c)`, `c = √(2/π)`, `left = 0.5 * (1 + t)`,
`right = ((0.5 * x) * (1 - t * t)) * (c * (1 + x² · (3 · 0.044715)))`. -/
theorem vjp_geluTanh (x : ℝ) :
    HasDerivAt (UnOp.eval .geluTanh)
      (1 / 2 * (1 + Real.tanh (x * (x * x * (44715 / 1000000) + 1) * Real.sqrt (2 / Real.pi)))
        + 1 / 2 * x
          * (1 - Real.tanh (x * (x * x * (44715 / 1000000) + 1) * Real.sqrt (2 / Real.pi))
              * Real.tanh (x * (x * x * (44715 / 1000000) + 1) * Real.sqrt (2 / Real.pi)))
          * (Real.sqrt (2 / Real.pi) * (1 + x * x * (3 * (44715 / 1000000))))) x := by
  show HasDerivAt (fun y : ℝ => y / 2 *
      (1 + Real.tanh (Real.sqrt (2 / Real.pi) * (y + 44715 / 1000000 * (y * y * y))))) _ x
  have hid : HasDerivAt (fun y : ℝ => y) 1 x := hasDerivAt_id' x
  have h2 : HasDerivAt (fun y : ℝ => y * y) _ x := hid.mul hid
  have h3 : HasDerivAt (fun y : ℝ => y * y * y) _ x := h2.mul hid
  have hk : HasDerivAt (fun y : ℝ => 44715 / 1000000 * (y * y * y)) _ x :=
    h3.const_mul (44715 / 1000000)
  have hs : HasDerivAt (fun y : ℝ => y + 44715 / 1000000 * (y * y * y)) _ x := hid.add hk
  have hu : HasDerivAt
      (fun y : ℝ => Real.sqrt (2 / Real.pi) * (y + 44715 / 1000000 * (y * y * y))) _ x :=
    hs.const_mul (Real.sqrt (2 / Real.pi))
  have ht : HasDerivAt (fun y : ℝ =>
      1 + Real.tanh (Real.sqrt (2 / Real.pi) * (y + 44715 / 1000000 * (y * y * y)))) _ x :=
    (tanh_comp_hasDerivAt hu).const_add 1
  have hh : HasDerivAt (fun y : ℝ => y / 2) _ x := hid.div_const 2
  have h : HasDerivAt (fun y : ℝ => y / 2 *
      (1 + Real.tanh (Real.sqrt (2 / Real.pi) * (y + 44715 / 1000000 * (y * y * y))))) _ x :=
    hh.mul ht
  have harg : x * (x * x * (44715 / 1000000) + 1) * Real.sqrt (2 / Real.pi) =
      Real.sqrt (2 / Real.pi) * (x + 44715 / 1000000 * (x * x * x)) := by ring
  refine h.congr_deriv ?_
  try beta_reduce
  rw [harg]
  ring

/-- `log`: the vjp `dy / x` (`_VJPS["log"]`), for `0 < x`. -/
theorem vjp_log (x : ℝ) (hx : 0 < x) : HasDerivAt (UnOp.eval .log) (1 / x) x := by
  show HasDerivAt (fun y : ℝ => Real.log y) (1 / x) x
  exact (Real.hasDerivAt_log hx.ne').congr_deriv (one_div x).symm

/-- `tanh`: the vjp `dy * (1 - y * y)` (`_VJPS["tanh"]`). -/
theorem vjp_tanh (x : ℝ) :
    HasDerivAt (UnOp.eval .tanh) (1 - UnOp.eval .tanh x * UnOp.eval .tanh x) x := by
  show HasDerivAt Real.tanh (1 - Real.tanh x * Real.tanh x) x
  exact tanh_hasDerivAt x

/-- `erf`: the vjp `dy * (exp(-(x * x)) * (2 / √π))` (`_VJPS["erf"]`), from the fundamental
theorem of calculus on `realErf x = 2/√π · ∫₀ˣ exp(-t²)`. -/
theorem vjp_erf (x : ℝ) :
    HasDerivAt (UnOp.eval .erf) (Real.exp (-(x * x)) * (2 / Real.sqrt Real.pi)) x := by
  show HasDerivAt (fun y : ℝ => (2 / Real.sqrt Real.pi) * ∫ t in (0:ℝ)..y, Real.exp (-(t ^ 2)))
    (Real.exp (-(x * x)) * (2 / Real.sqrt Real.pi)) x
  have hc : Continuous (fun t : ℝ => Real.exp (-(t ^ 2))) := by
    first
      | fun_prop
      | exact Real.continuous_exp.comp (continuous_pow 2).neg
      | continuity
  have hi : HasDerivAt (fun y : ℝ => ∫ t in (0:ℝ)..y, Real.exp (-(t ^ 2)))
      (Real.exp (-(x ^ 2))) x :=
    (hc.integral_hasStrictDerivAt 0 x).hasDerivAt
  have h : HasDerivAt
      (fun y : ℝ => (2 / Real.sqrt Real.pi) * ∫ t in (0:ℝ)..y, Real.exp (-(t ^ 2))) _ x :=
    hi.const_mul (2 / Real.sqrt Real.pi)
  exact h.congr_deriv (by
    first
      | (rw [sq]; ring1)
      | (simp only [sq]; ring1)
      | ring_nf)

/-- `sigmoid`: the vjp `dy * (y * (1 - y))` (`_VJPS["sigmoid"]`). -/
theorem vjp_sigmoid (x : ℝ) :
    HasDerivAt (UnOp.eval .sigmoid) (UnOp.eval .sigmoid x * (1 - UnOp.eval .sigmoid x)) x := by
  show HasDerivAt (fun y : ℝ => 1 / (1 + Real.exp (-y)))
    (1 / (1 + Real.exp (-x)) * (1 - 1 / (1 + Real.exp (-x)))) x
  have hne : (1 : ℝ) + Real.exp (-x) ≠ 0 := by
    first
      | exact (add_pos one_pos (Real.exp_pos (-x))).ne'
      | positivity
  have h : HasDerivAt (fun y : ℝ => 1 / (1 + Real.exp (-y))) _ x :=
    (hasDerivAt_const x (1 : ℝ)).div (one_add_exp_neg_hasDerivAt x) hne
  exact h.congr_deriv (by
    first
      | (field_simp; ring1)
      | (field_simp; done)
      | (field_simp [hne]; ring1))

/-- `abs`: the vjp `dy * (gt(x, 0) - lt(x, 0))` (`_VJPS["abs"]`), for `x ≠ 0` (at `0` the rule
gives `0`, torch's `sgn`: a convention, not a derivative). -/
theorem vjp_abs (x : ℝ) (hx : x ≠ 0) :
    HasDerivAt (UnOp.eval .abs) (BinOp.eval .gt x 0 - BinOp.eval .lt x 0) x := by
  show HasDerivAt (fun y : ℝ => |y|)
    ((if x > 0 then (1 : ℝ) else 0) - (if x < 0 then (1 : ℝ) else 0)) x
  rcases hx.lt_or_gt with h | h
  · exact (hasDerivAt_abs_neg h).congr_deriv (by
      first
        | (simp [h, not_lt.mpr h.le]; done)
        | (rw [if_neg (not_lt.mpr h.le), if_pos h]; norm_num))
  · exact (hasDerivAt_abs_pos h).congr_deriv (by
      first
        | (simp [h, not_lt.mpr h.le]; done)
        | (rw [if_pos h, if_neg (not_lt.mpr h.le)]; norm_num))

-- Binary ops, one argument at a time ---------------------------------------------------------

/-- `add`, first operand: the vjp `dy` (`_VJPS["add"]`). -/
theorem vjp_add_left (a b : ℝ) : HasDerivAt (fun t => BinOp.eval .add t b) 1 a := by
  show HasDerivAt (fun t : ℝ => t + b) 1 a
  exact (hasDerivAt_id' a).add_const b

/-- `add`, second operand: the vjp `dy` (`_VJPS["add"]`). -/
theorem vjp_add_right (a b : ℝ) : HasDerivAt (fun t => BinOp.eval .add a t) 1 b := by
  show HasDerivAt (fun t : ℝ => a + t) 1 b
  exact (hasDerivAt_id' b).const_add a

/-- `sub`, first operand: the vjp `dy` (`_VJPS["sub"]`). -/
theorem vjp_sub_left (a b : ℝ) : HasDerivAt (fun t => BinOp.eval .sub t b) 1 a := by
  show HasDerivAt (fun t : ℝ => t - b) 1 a
  exact (hasDerivAt_id' a).sub_const b

/-- `sub`, second operand: the vjp `-dy` (`_VJPS["sub"]`). -/
theorem vjp_sub_right (a b : ℝ) : HasDerivAt (fun t => BinOp.eval .sub a t) (-1) b := by
  show HasDerivAt (fun t : ℝ => a - t) (-1) b
  exact (hasDerivAt_id' b).const_sub a

/-- `mul`, first operand: the vjp `dy * b` (`_VJPS["mul"]`). -/
theorem vjp_mul_left (a b : ℝ) : HasDerivAt (fun t => BinOp.eval .mul t b) b a := by
  show HasDerivAt (fun t : ℝ => t * b) b a
  exact ((hasDerivAt_id' a).mul_const b).congr_deriv (one_mul b)

/-- `mul`, second operand: the vjp `dy * a` (`_VJPS["mul"]`). -/
theorem vjp_mul_right (a b : ℝ) : HasDerivAt (fun t => BinOp.eval .mul a t) a b := by
  show HasDerivAt (fun t : ℝ => a * t) a b
  exact ((hasDerivAt_id' b).const_mul a).congr_deriv (mul_one a)

/-- `div`, first operand: the vjp `dy / b` (`_VJPS["div"]`). The rule is meant for `b ≠ 0`
(Lean's `t / 0 = 0` would make the identity hold at `b = 0` too). -/
theorem vjp_div_left (a b : ℝ) (_hb : b ≠ 0) :
    HasDerivAt (fun t => BinOp.eval .div t b) (1 / b) a := by
  show HasDerivAt (fun t : ℝ => t / b) (1 / b) a
  exact (hasDerivAt_id' a).div_const b

/-- `div`, second operand: the vjp `-((dy * a) / (b * b))` (`_VJPS["div"]`), for `b ≠ 0`. -/
theorem vjp_div_right (a b : ℝ) (hb : b ≠ 0) :
    HasDerivAt (fun t => BinOp.eval .div a t) (-(a / (b * b))) b := by
  show HasDerivAt (fun t : ℝ => a / t) (-(a / (b * b))) b
  have h : HasDerivAt (fun t : ℝ => a / t) _ b :=
    (hasDerivAt_const b a).div (hasDerivAt_id' b) hb
  exact h.congr_deriv (by first | ring1 | (field_simp; ring1) | (field_simp; done))

/-! `max`/`min` away from ties. At a tie `a = b` neither is differentiable; the Python rule
(`_tie_weight`) gives each operand half the gradient, as torch's `maximum`/`minimum` do. That is a
convention, not a theorem, and nothing here states it. -/

/-- `max`, first operand winning (`b < a`): the vjp `dy * gt(a, b) = dy` (`_extremum_vjp`). -/
theorem vjp_max_left (a b : ℝ) (h : b < a) : HasDerivAt (fun t => BinOp.eval .max t b) 1 a := by
  have e : Filter.EventuallyEq (nhds a) (fun t => BinOp.eval .max t b) (fun t : ℝ => t) := by
    filter_upwards [Ioi_mem_nhds h] with y hy
    first
      | exact max_eq_left (le_of_lt (Set.mem_Ioi.mp hy))
      | exact max_eq_left (le_of_lt hy)
  first
    | exact (hasDerivAt_id' a).congr_of_eventuallyEq e
    | exact (hasDerivAt_id' a).congr_of_eventuallyEq e.symm

/-- `max`, second operand losing (`b < a`): the vjp `dy * lt(a, b) = 0` (`_extremum_vjp`). -/
theorem vjp_max_right_off (a b : ℝ) (h : b < a) :
    HasDerivAt (fun t => BinOp.eval .max a t) 0 b := by
  have e : Filter.EventuallyEq (nhds b) (fun t => BinOp.eval .max a t) (fun _ : ℝ => a) := by
    filter_upwards [Iio_mem_nhds h] with y hy
    first
      | exact max_eq_left (le_of_lt (Set.mem_Iio.mp hy))
      | exact max_eq_left (le_of_lt hy)
  first
    | exact (hasDerivAt_const b a).congr_of_eventuallyEq e
    | exact (hasDerivAt_const b a).congr_of_eventuallyEq e.symm

/-- `max`, second operand winning (`a < b`): the vjp `dy * gt(b, a) = dy` (`_extremum_vjp`). -/
theorem vjp_max_right (a b : ℝ) (h : a < b) : HasDerivAt (fun t => BinOp.eval .max a t) 1 b := by
  have e : Filter.EventuallyEq (nhds b) (fun t => BinOp.eval .max a t) (fun t : ℝ => t) := by
    filter_upwards [Ioi_mem_nhds h] with y hy
    first
      | exact max_eq_right (le_of_lt (Set.mem_Ioi.mp hy))
      | exact max_eq_right (le_of_lt hy)
  first
    | exact (hasDerivAt_id' b).congr_of_eventuallyEq e
    | exact (hasDerivAt_id' b).congr_of_eventuallyEq e.symm

/-- `max`, first operand losing (`a < b`): the vjp `dy * gt(a, b) = 0` (`_extremum_vjp`). -/
theorem vjp_max_left_off (a b : ℝ) (h : a < b) :
    HasDerivAt (fun t => BinOp.eval .max t b) 0 a := by
  have e : Filter.EventuallyEq (nhds a) (fun t => BinOp.eval .max t b) (fun _ : ℝ => b) := by
    filter_upwards [Iio_mem_nhds h] with y hy
    first
      | exact max_eq_right (le_of_lt (Set.mem_Iio.mp hy))
      | exact max_eq_right (le_of_lt hy)
  first
    | exact (hasDerivAt_const a b).congr_of_eventuallyEq e
    | exact (hasDerivAt_const a b).congr_of_eventuallyEq e.symm

/-- `min`, first operand winning (`a < b`): the vjp `dy * lt(a, b) = dy` (`_extremum_vjp`). -/
theorem vjp_min_left (a b : ℝ) (h : a < b) : HasDerivAt (fun t => BinOp.eval .min t b) 1 a := by
  have e : Filter.EventuallyEq (nhds a) (fun t => BinOp.eval .min t b) (fun t : ℝ => t) := by
    filter_upwards [Iio_mem_nhds h] with y hy
    first
      | exact min_eq_left (le_of_lt (Set.mem_Iio.mp hy))
      | exact min_eq_left (le_of_lt hy)
  first
    | exact (hasDerivAt_id' a).congr_of_eventuallyEq e
    | exact (hasDerivAt_id' a).congr_of_eventuallyEq e.symm

/-- `min`, second operand losing (`a < b`): the vjp `dy * lt(b, a) = 0` (`_extremum_vjp`). -/
theorem vjp_min_right_off (a b : ℝ) (h : a < b) :
    HasDerivAt (fun t => BinOp.eval .min a t) 0 b := by
  have e : Filter.EventuallyEq (nhds b) (fun t => BinOp.eval .min a t) (fun _ : ℝ => a) := by
    filter_upwards [Ioi_mem_nhds h] with y hy
    first
      | exact min_eq_left (le_of_lt (Set.mem_Ioi.mp hy))
      | exact min_eq_left (le_of_lt hy)
  first
    | exact (hasDerivAt_const b a).congr_of_eventuallyEq e
    | exact (hasDerivAt_const b a).congr_of_eventuallyEq e.symm

/-- `min`, second operand winning (`b < a`): the vjp `dy * lt(b, a) = dy` (`_extremum_vjp`). -/
theorem vjp_min_right (a b : ℝ) (h : b < a) : HasDerivAt (fun t => BinOp.eval .min a t) 1 b := by
  have e : Filter.EventuallyEq (nhds b) (fun t => BinOp.eval .min a t) (fun t : ℝ => t) := by
    filter_upwards [Iio_mem_nhds h] with y hy
    first
      | exact min_eq_right (le_of_lt (Set.mem_Iio.mp hy))
      | exact min_eq_right (le_of_lt hy)
  first
    | exact (hasDerivAt_id' b).congr_of_eventuallyEq e
    | exact (hasDerivAt_id' b).congr_of_eventuallyEq e.symm

/-- `min`, first operand losing (`b < a`): the vjp `dy * lt(a, b) = 0` (`_extremum_vjp`). -/
theorem vjp_min_left_off (a b : ℝ) (h : b < a) :
    HasDerivAt (fun t => BinOp.eval .min t b) 0 a := by
  have e : Filter.EventuallyEq (nhds a) (fun t => BinOp.eval .min t b) (fun _ : ℝ => b) := by
    filter_upwards [Ioi_mem_nhds h] with y hy
    first
      | exact min_eq_right (le_of_lt (Set.mem_Ioi.mp hy))
      | exact min_eq_right (le_of_lt hy)
  first
    | exact (hasDerivAt_const a b).congr_of_eventuallyEq e
    | exact (hasDerivAt_const a b).congr_of_eventuallyEq e.symm

-- Structural rules of leantile.autodiff (adjoint identities over finite sums) ----------------

/-- A sum's cotangent is its result's, broadcast along the summed axis (`_Reverse.back`,
`Reduce` sum): `Σ_i dy_i · (Σ_k x_ik) = Σ_i Σ_k dy_i · x_ik`. -/
theorem vjp_sum_adjoint (m n : ℕ) (dy : Fin m → ℝ) (x : Fin m → Fin n → ℝ) :
    ∑ i, dy i * (∑ k, x i k) = ∑ i, ∑ k, dy i * x i k := by
  first
    | (simp only [Finset.mul_sum]; done)
    | exact Finset.sum_congr rfl (fun _ _ => by rw [Finset.mul_sum])

/-- A contraction's cotangent for its first operand is `dA = dY Bᵀ` (`_Reverse.back_matmul`):
`Σ_ij dY_ij (Σ_k A_ik B_kj) = Σ_ik A_ik (Σ_j dY_ij B_kj)`. -/
theorem vjp_contract_left (m K n : ℕ) (A : Fin m → Fin K → ℝ) (B : Fin K → Fin n → ℝ)
    (dY : Fin m → Fin n → ℝ) :
    ∑ i, ∑ j, dY i j * (∑ k, A i k * B k j) = ∑ i, ∑ k, A i k * (∑ j, dY i j * B k j) := by
  calc ∑ i, ∑ j, dY i j * (∑ k, A i k * B k j)
      = ∑ i, ∑ j, ∑ k, A i k * (dY i j * B k j) := by
        refine Finset.sum_congr rfl (fun i _ => Finset.sum_congr rfl (fun j _ => ?_))
        rw [Finset.mul_sum]
        refine Finset.sum_congr rfl (fun k _ => ?_)
        ring
    _ = ∑ i, ∑ k, ∑ j, A i k * (dY i j * B k j) := by
        refine Finset.sum_congr rfl (fun i _ => ?_)
        exact Finset.sum_comm
    _ = ∑ i, ∑ k, A i k * (∑ j, dY i j * B k j) := by
        refine Finset.sum_congr rfl (fun i _ => Finset.sum_congr rfl (fun k _ => ?_))
        rw [Finset.mul_sum]

/-- A contraction's cotangent for its second operand is `dB = Aᵀ dY` (`_Reverse.back_matmul`):
`Σ_ij dY_ij (Σ_k A_ik B_kj) = Σ_kj B_kj (Σ_i A_ik dY_ij)`. -/
theorem vjp_contract_right (m K n : ℕ) (A : Fin m → Fin K → ℝ) (B : Fin K → Fin n → ℝ)
    (dY : Fin m → Fin n → ℝ) :
    ∑ i, ∑ j, dY i j * (∑ k, A i k * B k j) = ∑ k, ∑ j, B k j * (∑ i, A i k * dY i j) := by
  calc ∑ i, ∑ j, dY i j * (∑ k, A i k * B k j)
      = ∑ i, ∑ j, ∑ k, dY i j * (A i k * B k j) := by
        refine Finset.sum_congr rfl (fun i _ => Finset.sum_congr rfl (fun j _ => ?_))
        rw [Finset.mul_sum]
    _ = ∑ i, ∑ k, ∑ j, dY i j * (A i k * B k j) := by
        refine Finset.sum_congr rfl (fun i _ => ?_)
        exact Finset.sum_comm
    _ = ∑ k, ∑ i, ∑ j, dY i j * (A i k * B k j) := Finset.sum_comm
    _ = ∑ k, ∑ j, ∑ i, dY i j * (A i k * B k j) := by
        refine Finset.sum_congr rfl (fun k _ => ?_)
        exact Finset.sum_comm
    _ = ∑ k, ∑ j, B k j * (∑ i, A i k * dY i j) := by
        refine Finset.sum_congr rfl (fun k _ => Finset.sum_congr rfl (fun j _ => ?_))
        rw [Finset.mul_sum]
        refine Finset.sum_congr rfl (fun i _ => ?_)
        ring

/-- A broadcast operand's cotangent is summed over the axis it was broadcast along
(`_Reverse.give`): `Σ_{k<n} dy_k · b = (Σ_{k<n} dy_k) · b`. -/
theorem vjp_broadcast_adjoint (n : ℕ) (dy : ℕ → ℝ) (b : ℝ) :
    ∑ k ∈ Finset.range n, dy k * b = (∑ k ∈ Finset.range n, dy k) * b := by
  first
    | rw [Finset.sum_mul]
    | simp only [Finset.sum_mul]

/-- The count factor (`_Reverse.give` multiplies by `size_const(a)` for an axis the
contribution is constant along): `Σ_{k<n} c = n · c`. -/
theorem sum_const_count (n : ℕ) (c : ℝ) : ∑ _k ∈ Finset.range n, c = (n : ℝ) * c := by
  first
    | (simp; done)
    | rw [Finset.sum_const, Finset.card_range, nsmul_eq_mul]

-- Row forms (`leantile.autodiff.row_forms`): closed-form cotangents ---------------------------

/-- The softmax row's Jacobian applied to a cotangent (`_Reverse.back_row`, softmax): with
`∂p_u/∂z_v = p_u (δ_uv - p_v)`, `Σ_u dp_u ∂p_u/∂z_v = p_v (dp_v - Σ_u dp_u p_u)`. The Jacobian
itself is the quotient rule on `exp(z_u - m) / Σ exp(z - m)`; `m` drops out
(`softmax_shift_invariant`), which is why no gradient flows through the max. -/
theorem vjp_softmax_row {n : ℕ} (p dp : Fin n → ℝ) (v : Fin n) :
    ∑ u, dp u * (p u * ((if u = v then 1 else 0) - p v)) = p v * (dp v - ∑ u, dp u * p u) := by
  have h : ∀ u, dp u * (p u * ((if u = v then 1 else 0) - p v))
      = (if u = v then dp u * p u else 0) - dp u * p u * p v := by
    intro u
    split_ifs <;> ring
  rw [Finset.sum_congr rfl (fun u _ => h u), Finset.sum_sub_distrib, ← Finset.sum_mul]
  -- (`simp` may close the goal itself: `first | done | ring` after it, never `ring` on no goal)
  first
    | (rw [Finset.sum_ite_eq']; simp only [Finset.mem_univ, ↓reduceIte]; ring)
    | (rw [Finset.sum_ite_eq]; simp only [Finset.mem_univ, ↓reduceIte]; ring)
    | (simp; first | done | ring)

/-- The log-softmax row (`back_row`, log_softmax): `∂y_u/∂z_v = δ_uv - p_v`, so
`Σ_u dy_u ∂y_u/∂z_v = dy_v - p_v Σ_u dy_u` (`p_v = exp y_v`). -/
theorem vjp_log_softmax_row {n : ℕ} (p dy : Fin n → ℝ) (v : Fin n) :
    ∑ u, dy u * ((if u = v then 1 else 0) - p v) = dy v - p v * ∑ u, dy u := by
  have h : ∀ u, dy u * ((if u = v then 1 else 0) - p v) = (if u = v then dy u else 0) - dy u * p v := by
    intro u
    split_ifs <;> ring
  rw [Finset.sum_congr rfl (fun u _ => h u), Finset.sum_sub_distrib, ← Finset.sum_mul]
  -- (`simp` may close the goal itself: `first | done | ring` after it, never `ring` on no goal)
  first
    | (rw [Finset.sum_ite_eq']; simp only [Finset.mem_univ, ↓reduceIte]; ring)
    | (rw [Finset.sum_ite_eq]; simp only [Finset.mem_univ, ↓reduceIte]; ring)
    | (simp; first | done | ring)

end LeanTile
