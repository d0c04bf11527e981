import Mathlib
import LeanTile.IR

/-!
# LeanTile.Semantics — what a graph means, over ℝ

An index assigns a position to every axis name (`Idx := String → ℕ`); a tensor is a
function from indices to ℝ that reads only the positions of its own axes. With that
choice broadcasting by name is free (an elementwise op just reads both arguments at the
same index), a reduction over axis `a` sums over the positions of `a`, and a matmul
contracting `a` of X with `b` of Y sums X[a := k] * Y[b := k].

Everything here is noncomputable (Real.exp, Real.sqrt, Real.log, rpow, the integral in `erf`)
and never exported.
Precision (dtypes, casts) is not modelled: the semantics is exact real arithmetic.

## Masks: the masked semantics

A mask writes `select(keep, s, "-inf")`, and ℝ has no −∞: in `Graph.eval` the constant
`"-inf"` is the ordinary real `env.const "-inf"`, so `Graph.eval` is the meaning only of graphs
without that constant. The meaning of every graph, masked or not, is `Graph.evalM`: the same
evaluation over `MVal`, whose values are a real (`val x`), `masked` (the −∞ of `"-inf"`) or
`undef` (+∞ or NaN, which IEEE arithmetic on −∞ can give; nothing is claimed about it). Each op
does on `masked` what IEEE arithmetic does on −∞: `exp(−∞) = 0`, `−∞ − x = −∞`, `−∞ / c = −∞`
for `c > 0`, `max(−∞, x) = x`, a sum with a −∞ term is −∞, comparisons order −∞ below every
real, `select` picks it like any value. `MVal.expM` is the weight of a score in a softmax:
`exp x`, and 0 for a masked score. `Rules/Masked.lean` proves that `Graph.evalM` is
`Graph.eval` (each value wrapped in `val`) on every graph without `"-inf"`
(`evalM_eq_eval`), and how a mask's select makes a score `masked`; `Rules/MaskSkip.lean`
states `skip_masked_tiles` over the scores `Graph.evalNodesM` gives.
-/

namespace LeanTile

noncomputable section

/-- A position for every axis name. -/
abbrev Idx := String → ℕ

/-- A tensor over named axes. -/
abbrev Tensor := Idx → ℝ

/-- What a graph is evaluated against. -/
structure Env where
  /-- Axis sizes. -/
  size : String → ℕ
  /-- Input tensors by name. -/
  input : String → Tensor
  /-- The real number a decimal literal such as `"1e-05"` denotes. -/
  const : String → ℝ

/-- The error function `erf x = 2/√π · ∫₀ˣ exp(-t²) dt`. Defined here because Mathlib
v4.34.0 (our pin) has, as far as we could find, no `Real.erf`; later Mathlib versions define
`Real.erf` by this same formula (`Mathlib/Analysis/SpecialFunctions/Erf.lean`). -/
def realErf (x : ℝ) : ℝ :=
  (2 / Real.sqrt Real.pi) * ∫ t in (0:ℝ)..x, Real.exp (-(t ^ 2))

/-- `select`: `a` where `c ≠ 0`, else `b` (`torch.where(c != 0, a, b)`). -/
def selectVal (c a b : ℝ) : ℝ := if c ≠ 0 then a else b

/-- The meaning of an elementwise unary op. -/
def UnOp.eval : UnOp → ℝ → ℝ
  | .exp, x => Real.exp x
  | .exp2, x => (2 : ℝ) ^ x
  | .neg, x => -x
  | .square, x => x * x
  | .sqrt, x => Real.sqrt x
  | .rsqrt, x => 1 / Real.sqrt x
  | .recip, x => 1 / x
  | .silu, x => x / (1 + Real.exp (-x))
  | .geluTanh, x =>
    x / 2 * (1 + Real.tanh (Real.sqrt (2 / Real.pi) * (x + 44715 / 1000000 * (x * x * x))))
  | .log, x => Real.log x
  | .tanh, x => Real.tanh x
  | .erf, x => realErf x
  | .sigmoid, x => 1 / (1 + Real.exp (-x))
  | .abs, x => (|x|)

/-- The meaning of an elementwise binary op. Comparisons give 1 where they hold, else 0. -/
def BinOp.eval : BinOp → ℝ → ℝ → ℝ
  | .add, a, b => a + b
  | .sub, a, b => a - b
  | .mul, a, b => a * b
  | .div, a, b => a / b
  | .max, a, b => Max.max a b
  | .min, a, b => Min.min a b
  | .lt, a, b => if a < b then 1 else 0
  | .le, a, b => if a ≤ b then 1 else 0
  | .eq, a, b => if a = b then 1 else 0
  | .ge, a, b => if a ≥ b then 1 else 0
  | .gt, a, b => if a > b then 1 else 0

/-- Sum of `t` along axis `a` of size `n`. -/
def sumAlong (n : ℕ) (a : String) (t : Tensor) : Tensor :=
  fun ι => ∑ k ∈ Finset.range n, t (Function.update ι a k)

/-- Max of `t` along axis `a` of size `n` (sizes are ≥ 1; position 0 seeds the fold). -/
def maxAlong (n : ℕ) (a : String) (t : Tensor) : Tensor :=
  fun ι => (List.range n).foldl (fun m k => max m (t (Function.update ι a k)))
    (t (Function.update ι a 0))

/-- Contract axis `axA` of `x` with axis `axB` of `y`, both of size `n`. -/
def contract (n : ℕ) (axA axB : String) (x y : Tensor) : Tensor :=
  fun ι => ∑ k ∈ Finset.range n, x (Function.update ι axA k) * y (Function.update ι axB k)

/-- The value of node `i` among the values computed so far (0 if there is none). -/
def getVal (vals : List Tensor) (i : ℕ) : Tensor :=
  (vals[i]?).getD (fun _ => 0)

/-- The meaning of one op, given the values of the earlier nodes. -/
def evalOp (env : Env) (vals : List Tensor) : Op → Tensor
  | .input name _ => env.input name
  | .const v => fun _ => env.const v
  | .sizeConst a => fun _ => (env.size a : ℝ)
  | .iota a => fun ι => (ι a : ℝ)
  | .unary u x => fun ι => u.eval (getVal vals x ι)
  | .cast x _ => getVal vals x
  | .binary b x y => fun ι => b.eval (getVal vals x ι) (getVal vals y ι)
  | .select c x y => fun ι => selectVal (getVal vals c ι) (getVal vals x ι) (getVal vals y ι)
  | .reduce .sum x a => sumAlong (env.size a) a (getVal vals x)
  | .reduce .max x a => maxAlong (env.size a) a (getVal vals x)
  | .matmul x y axA axB => contract (env.size axA) axA axB (getVal vals x) (getVal vals y)

/-- The values of all nodes, in id order. -/
def Graph.evalNodes (g : Graph) (env : Env) : List Tensor :=
  g.nodes.foldl (fun vals n => vals ++ [evalOp env vals n.op]) []

/-- The value of output `out` (0 if the graph has no such output). -/
def Graph.eval (g : Graph) (env : Env) (out : String) : Tensor :=
  match List.lookup out g.outputs with
  | some i => getVal (g.evalNodes env) i
  | none => fun _ => 0

/-- Elementwise map of a tensor. -/
def mapT (f : ℝ → ℝ) (t : Tensor) : Tensor := fun ι => f (t ι)

/-- Elementwise zip of two tensors (broadcast by name is implicit). -/
def zipT (f : ℝ → ℝ → ℝ) (s t : Tensor) : Tensor := fun ι => f (s ι) (t ι)

theorem evalOp_unary (env : Env) (vals : List Tensor) (u : UnOp) (x : ℕ) :
    evalOp env vals (.unary u x) = mapT u.eval (getVal vals x) := rfl

theorem evalOp_binary (env : Env) (vals : List Tensor) (b : BinOp) (x y : ℕ) :
    evalOp env vals (.binary b x y) = zipT b.eval (getVal vals x) (getVal vals y) := rfl

theorem evalOp_select (env : Env) (vals : List Tensor) (c x y : ℕ) (ι : Idx) :
    evalOp env vals (.select c x y) ι =
      selectVal (getVal vals c ι) (getVal vals x ι) (getVal vals y ι) := rfl

theorem evalOp_iota (env : Env) (vals : List Tensor) (a : String) (ι : Idx) :
    evalOp env vals (.iota a) ι = (ι a : ℝ) := rfl

-- The masked semantics -----------------------------------------------------------------

/-- A value of the masked semantics: a real number (`val x`), `masked` (the −∞ a mask writes,
the constant `"-inf"`), or `undef` (what IEEE arithmetic on −∞ gives that is neither a real nor
−∞, i.e. +∞ or NaN; the semantics claims nothing about such a value, and no lemma about masks
needs one). -/
inductive MVal where
  | val (x : ℝ)
  | masked
  | undef

/-- A tensor of the masked semantics. -/
abbrev MTensor := Idx → MVal

/-- The weight of a score in a softmax sum: `exp x` for a real score, `exp(−∞) = 0` for a
masked one (0 for `undef` as well, which no lemma relies on). -/
def MVal.expM : MVal → ℝ
  | .val x => Real.exp x
  | .masked => 0
  | .undef => 0

/-- A real tensor as a tensor of the masked semantics (every value a real). -/
def liftT (t : Tensor) : MTensor := fun ι => .val (t ι)

/-- A unary op at −∞: `exp(−∞) = exp2(−∞) = 0`; every other op is `undef` there (IEEE gives
+∞ or NaN for most of them; the few with a finite value there are left `undef`, claiming
nothing, as no mask needs them). -/
def UnOp.maskedLimit : UnOp → MVal
  | .exp => .val 0
  | .exp2 => .val 0
  | _ => .undef

/-- The meaning of a unary op in the masked semantics. -/
def UnOp.evalM (u : UnOp) : MVal → MVal
  | .val x => .val (u.eval x)
  | .masked => u.maskedLimit
  | .undef => .undef

/-- `−∞ op y` for a real `y`, as IEEE arithmetic has it (`undef` where that is +∞ or NaN). -/
def BinOp.maskedLeft (b : BinOp) (y : ℝ) : MVal :=
  match b with
  | .add => .masked
  | .sub => .masked
  | .mul => if 0 < y then .masked else .undef
  | .div => if 0 < y then .masked else .undef
  | .max => .val y
  | .min => .masked
  | .lt => .val 1
  | .le => .val 1
  | .eq => .val 0
  | .ge => .val 0
  | .gt => .val 0

/-- `x op −∞` for a real `x`, as IEEE arithmetic has it (`x / −∞ = 0`). -/
def BinOp.maskedRight (b : BinOp) (x : ℝ) : MVal :=
  match b with
  | .add => .masked
  | .sub => .undef
  | .mul => if 0 < x then .masked else .undef
  | .div => .val 0
  | .max => .val x
  | .min => .masked
  | .lt => .val 0
  | .le => .val 0
  | .eq => .val 0
  | .ge => .val 1
  | .gt => .val 1

/-- `−∞ op −∞`, as IEEE arithmetic has it. -/
def BinOp.maskedBoth (b : BinOp) : MVal :=
  match b with
  | .add => .masked
  | .sub => .undef
  | .mul => .undef
  | .div => .undef
  | .max => .masked
  | .min => .masked
  | .lt => .val 0
  | .le => .val 1
  | .eq => .val 1
  | .ge => .val 1
  | .gt => .val 0

/-- The meaning of a binary op in the masked semantics (`undef` absorbs). -/
def BinOp.evalM (b : BinOp) : MVal → MVal → MVal
  | .val x, .val y => .val (b.eval x y)
  | .masked, .val y => b.maskedLeft y
  | .val x, .masked => b.maskedRight x
  | .masked, .masked => b.maskedBoth
  | _, _ => .undef

/-- `select` in the masked semantics: `a` where the condition is a nonzero real, else `b`; a
non-real condition (−∞, +∞, NaN) is `≠ 0` (`torch.where(c != 0, a, b)`), so it picks `a`. -/
def selectM (c a b : MVal) : MVal :=
  match c with
  | .val x => if x ≠ 0 then a else b
  | _ => a

/-- A constant: `"-inf"` is `masked`, any other decimal literal the real it denotes. -/
def constM (env : Env) (v : String) : MVal :=
  if v = "-inf" then .masked else .val (env.const v)

/-- Sum along axis `a`, left to right with the masked `add` (a −∞ term gives −∞). -/
def sumAlongM (n : ℕ) (a : String) (t : MTensor) : MTensor :=
  fun ι => (List.range n).foldl (fun acc k => BinOp.evalM .add acc (t (Function.update ι a k))) (.val 0)

/-- Max along axis `a` (position 0 seeds the fold, as `maxAlong`); −∞ is below every real. -/
def maxAlongM (n : ℕ) (a : String) (t : MTensor) : MTensor :=
  fun ι => (List.range n).foldl (fun m k => BinOp.evalM .max m (t (Function.update ι a k)))
    (t (Function.update ι a 0))

/-- Contraction with the masked `mul` and `add`. -/
def contractM (n : ℕ) (axA axB : String) (x y : MTensor) : MTensor :=
  fun ι => (List.range n).foldl
    (fun acc k => BinOp.evalM .add acc
      (BinOp.evalM .mul (x (Function.update ι axA k)) (y (Function.update ι axB k)))) (.val 0)

/-- The value of node `i` among the values computed so far (`val 0` if there is none). -/
def getValM (vals : List MTensor) (i : ℕ) : MTensor :=
  (vals[i]?).getD (fun _ => .val 0)

/-- The meaning of one op in the masked semantics, given the values of the earlier nodes. -/
def evalOpM (env : Env) (vals : List MTensor) : Op → MTensor
  | .input name _ => fun ι => .val (env.input name ι)
  | .const v => fun _ => constM env v
  | .sizeConst a => fun _ => .val (env.size a : ℝ)
  | .iota a => fun ι => .val (ι a : ℝ)
  | .unary u x => fun ι => u.evalM (getValM vals x ι)
  | .cast x _ => getValM vals x
  | .binary b x y => fun ι => b.evalM (getValM vals x ι) (getValM vals y ι)
  | .select c x y => fun ι => selectM (getValM vals c ι) (getValM vals x ι) (getValM vals y ι)
  | .reduce .sum x a => sumAlongM (env.size a) a (getValM vals x)
  | .reduce .max x a => maxAlongM (env.size a) a (getValM vals x)
  | .matmul x y axA axB => contractM (env.size axA) axA axB (getValM vals x) (getValM vals y)

/-- The values of all nodes in the masked semantics, in id order. -/
def Graph.evalNodesM (g : Graph) (env : Env) : List MTensor :=
  g.nodes.foldl (fun vals n => vals ++ [evalOpM env vals n.op]) []

/-- **The meaning of a graph** (masks included): the value of output `out` in the masked
semantics (`val 0` if the graph has no such output). -/
def Graph.evalM (g : Graph) (env : Env) (out : String) : MTensor :=
  match List.lookup out g.outputs with
  | some i => getValM (g.evalNodesM env) i
  | none => fun _ => .val 0

-- What the masked semantics does with −∞ (the facts a mask relies on) --------------------

theorem UnOp.evalM_val (u : UnOp) (x : ℝ) : u.evalM (.val x) = .val (u.eval x) := rfl

theorem BinOp.evalM_val (b : BinOp) (x y : ℝ) : b.evalM (.val x) (.val y) = .val (b.eval x y) := rfl

/-- `exp(−∞) = 0`. -/
theorem exp_masked : UnOp.evalM .exp .masked = .val 0 := rfl

/-- `exp` of a real or masked score is its weight `expM`. -/
theorem exp_evalM_eq_expM (x : MVal) (hx : x ≠ .undef) : UnOp.evalM .exp x = .val x.expM := by
  cases x with
  | val y => rfl
  | masked => rfl
  | undef => exact absurd rfl hx

/-- `−∞ − m = −∞`: the shift by the row max keeps a masked score masked. -/
theorem sub_masked_left (m : ℝ) : BinOp.evalM .sub .masked (.val m) = .masked := rfl

/-- `exp(−∞ − m) = 0`: a masked score weighs nothing in the softmax sums, whatever `m`. -/
theorem exp_sub_masked (m : ℝ) : UnOp.evalM .exp (BinOp.evalM .sub .masked (.val m)) = .val 0 := rfl

/-- `−∞ / c = −∞` for `c > 0`: the softmax scale keeps a masked score masked. -/
theorem div_masked_left (c : ℝ) (hc : 0 < c) : BinOp.evalM .div .masked (.val c) = .masked := by
  show (if 0 < c then MVal.masked else MVal.undef) = MVal.masked
  exact if_pos hc

/-- `max(−∞, x) = x`: a masked score never raises a max. -/
theorem max_masked_left (x : MVal) : BinOp.evalM .max .masked x = x := by
  cases x with
  | val y => rfl
  | masked => rfl
  | undef => rfl

/-- The constant `"-inf"` is the masked value. -/
theorem constM_neginf (env : Env) : constM env "-inf" = .masked := by
  show (if "-inf" = "-inf" then MVal.masked else MVal.val (env.const "-inf")) = MVal.masked
  exact if_pos rfl

/-- Any other constant is the real it denotes. -/
theorem constM_real (env : Env) (v : String) (hv : v ≠ "-inf") : constM env v = .val (env.const v) := by
  show (if v = "-inf" then MVal.masked else MVal.val (env.const v)) = MVal.val (env.const v)
  exact if_neg hv

/-- `select(0, a, b) = b`: where the mask drops a key, the select gives its third argument. -/
theorem selectM_drop (a b : MVal) : selectM (.val 0) a b = b := by
  show (if (0 : ℝ) ≠ 0 then a else b) = b
  exact if_neg (fun h => h rfl)

/-- `select(c, a, b) = a` for `c ≠ 0`: where the mask keeps a key, its score. -/
theorem selectM_keep (c : ℝ) (hc : c ≠ 0) (a b : MVal) : selectM (.val c) a b = a := by
  show (if c ≠ 0 then a else b) = a
  exact if_pos hc

theorem selectM_val (c a b : ℝ) : selectM (.val c) (.val a) (.val b) = .val (selectVal c a b) := by
  show (if c ≠ 0 then MVal.val a else MVal.val b) = MVal.val (if c ≠ 0 then a else b)
  by_cases hc : c ≠ 0
  · rw [if_pos hc, if_pos hc]
  · rw [if_neg hc, if_neg hc]

end

end LeanTile
