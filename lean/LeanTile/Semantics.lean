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

end

end LeanTile
