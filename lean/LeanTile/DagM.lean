import LeanTile.IR

/-!
# LeanTile.DagM — the architecture DSL

A state monad that appends numbered nodes. Every builder appends exactly the nodes
its Python namesake in `python/leantile/dag.py` appends, in the same order, so both
sides number nodes identically (`tests/lean/test_drift.py` holds this promise by
reading the `let x ← op args` lines of this file and of `Architectures/*.lean`).

Keep the subdags below in the one-call-per-line `let x ← op args` style: the drift
test parses them.

Builder names (Lean → Python `DagM` method):
`input`→`input`, `const`/`epsConst`→`const`, `sizeConst`→`size_const`, `iota`→`iota`,
`exp`, `exp2`, `neg`, `square`, `sqrt`, `rsqrt`, `recip`, `silu`, `geluTanh`→`gelu_tanh`,
`log`, `tanh`, `erf`, `sigmoid`, `absVal`→`abs`,
`castTo`→`cast`, `add`, `sub`, `mul`, `div`, `maximum`→`max`, `minimum`→`min`,
`lt`, `le`, `eq`, `ge`, `gt`, `select`→`select` (cond, a, b), `red`, `matmul`,
`output`, `softmaxSubdag`→`softmax`, `meanAlongSubdag`→`mean_along`,
`rmsNormSubdag`→`rms_norm`, `layerNormSubdag`→`layer_norm`.
(`castTo`, `maximum`, `minimum` and `absVal` avoid clashing with the root names `cast`, `max`,
`min` and Mathlib's `abs`: architecture files `open DSL` inside `namespace LeanTile`, where a
root name and an opened one would be ambiguous. `log`, `tanh`, `erf`, `sigmoid`, `lt`, `le`,
`eq`, `ge`, `gt`, `select` and `iota` are no root names of Lean core (the only import of these
files); Mathlib's are namespaced (`Real.log`, `Real.tanh`, `LT.lt`, …). A file that also
`open Real` would make `log`/`tanh` ambiguous: do not open `Real` in an architecture file.)
-/

namespace LeanTile

/-- A graph under construction. -/
structure Builder where
  name : String
  axes : List (String × Nat)
  nodes : Array Node := #[]
  outputs : List (String × Nat) := []

/-- The builder monad: state plus a clear error message on misuse. -/
abbrev DagM := StateT Builder (Except String)

namespace DSL

/-- The axes of an existing node. -/
def axesOf (i : Nat) : DagM (List String) := do
  let b ← get
  match b.nodes[i]? with
  | some n => pure n.axes
  | none => throw s!"builder: {i} is not a node of graph {b.name} so far"

/-- Append a node; its id is its position. -/
def push (op : Op) (axes : List String) : DagM Nat := do
  let b ← get
  let i := b.nodes.size
  set { b with nodes := b.nodes.push { id := i, op := op, axes := axes } }
  pure i

def hasAxis (b : Builder) (a : String) : Bool :=
  (List.lookup a b.axes).isSome

-- leaves ---------------------------------------------------------------------

def input (name : String) (axes : List String) (dtype : Dtype := .f16) : DagM Nat := do
  let b ← get
  for a in axes do
    unless hasAxis b a do
      throw s!"builder: input {name} names unknown axis {a}"
  push (.input name dtype) axes

/-- A named scalar constant, written as a decimal string such as `"1e-05"`. -/
def const (value : String) : DagM Nat :=
  push (.const value) []

/-- The epsilon of a norm (a `const` node). -/
def epsConst (value : String) : DagM Nat :=
  const value

/-- The size of an axis as a scalar. -/
def sizeConst (axis : String) : DagM Nat := do
  let b ← get
  unless hasAxis b axis do
    throw s!"builder: sizeConst names unknown axis {axis}"
  push (.sizeConst axis) []

/-- The position along `axis` (0, 1, …, n-1) as a value with axes `[axis]` (masks, clamps,
one-hot labels). -/
def iota (axis : String) : DagM Nat := do
  let b ← get
  unless hasAxis b axis do
    throw s!"builder: iota names unknown axis {axis}"
  push (.iota axis) [axis]

-- elementwise ------------------------------------------------------------------

def unary (u : UnOp) (x : Nat) : DagM Nat := do
  let ax ← axesOf x
  push (.unary u x) ax

def exp (x : Nat) : DagM Nat := unary .exp x
def exp2 (x : Nat) : DagM Nat := unary .exp2 x
def neg (x : Nat) : DagM Nat := unary .neg x
def square (x : Nat) : DagM Nat := unary .square x
def sqrt (x : Nat) : DagM Nat := unary .sqrt x
def rsqrt (x : Nat) : DagM Nat := unary .rsqrt x
def recip (x : Nat) : DagM Nat := unary .recip x
def silu (x : Nat) : DagM Nat := unary .silu x
def geluTanh (x : Nat) : DagM Nat := unary .geluTanh x
def log (x : Nat) : DagM Nat := unary .log x
def tanh (x : Nat) : DagM Nat := unary .tanh x
def erf (x : Nat) : DagM Nat := unary .erf x
def sigmoid (x : Nat) : DagM Nat := unary .sigmoid x
def absVal (x : Nat) : DagM Nat := unary .abs x

def castTo (x : Nat) (dtype : Dtype) : DagM Nat := do
  let ax ← axesOf x
  push (.cast x dtype) ax

def binary (op : BinOp) (a b : Nat) : DagM Nat := do
  let pa ← axesOf a
  let pb ← axesOf b
  push (.binary op a b) (binaryAxes pa pb)

def add (a b : Nat) : DagM Nat := binary .add a b
def sub (a b : Nat) : DagM Nat := binary .sub a b
def mul (a b : Nat) : DagM Nat := binary .mul a b
def div (a b : Nat) : DagM Nat := binary .div a b
def maximum (a b : Nat) : DagM Nat := binary .max a b
def minimum (a b : Nat) : DagM Nat := binary .min a b
def lt (a b : Nat) : DagM Nat := binary .lt a b
def le (a b : Nat) : DagM Nat := binary .le a b
def eq (a b : Nat) : DagM Nat := binary .eq a b
def ge (a b : Nat) : DagM Nat := binary .ge a b
def gt (a b : Nat) : DagM Nat := binary .gt a b

/-- `a` where `cond ≠ 0`, else `b`; broadcast by name: a's axes, then b's, then cond's
(`selectAxes`, Python's `ir.select_axes`). -/
def select (cond a b : Nat) : DagM Nat := do
  let pc ← axesOf cond
  let pa ← axesOf a
  let pb ← axesOf b
  push (.select cond a b) (selectAxes pc pa pb)

-- contractions -------------------------------------------------------------------

/-- Reduce `x` along `axis` (`.sum` or `.max`). -/
def red (kind : RedKind) (x : Nat) (axis : String) : DagM Nat := do
  let ax ← axesOf x
  unless ax.contains axis do
    throw s!"builder: reduce axis {axis} is not an axis of node {x}"
  push (.reduce kind x axis) (ax.filter (fun a => a != axis))

/-- Contract axis `axisA` of `a` with axis `axisB` of `b`. -/
def matmul (a b : Nat) (axisA axisB : String) : DagM Nat := do
  let pa ← axesOf a
  let pb ← axesOf b
  unless pa.contains axisA && pb.contains axisB do
    throw s!"builder: matmul contraction axes {axisA}/{axisB} not in nodes {a}/{b}"
  push (.matmul a b axisA axisB) (matmulAxes pa pb axisA axisB)

-- subdags (same node order as python/leantile/dag.py) ------------------------------

/-- softmax along `axis`: max, sub, exp, sum, div. -/
def softmaxSubdag (x : Nat) (axis : String) : DagM Nat := do
  let m ← red .max x axis
  let c ← sub x m
  let e ← exp c
  let s ← red .sum e axis
  let p ← div e s
  pure p

/-- mean along `axis`: sum, sizeConst, div. -/
def meanAlongSubdag (x : Nat) (axis : String) : DagM Nat := do
  let s ← red .sum x axis
  let n ← sizeConst axis
  let mu ← div s n
  pure mu

/-- rmsnorm without gain: x * rsqrt(mean(x²) + eps). -/
def rmsNormSubdag (x : Nat) (axis : String) (eps : String := "1e-05") : DagM Nat := do
  let sq ← square x
  let ms ← meanAlongSubdag sq axis
  let e ← epsConst eps
  let t ← add ms e
  let r ← rsqrt t
  let y ← mul x r
  pure y

/-- layernorm without affine: (x - μ) * rsqrt(mean((x - μ)²) + eps). -/
def layerNormSubdag (x : Nat) (axis : String) (eps : String := "1e-05") : DagM Nat := do
  let mu ← meanAlongSubdag x axis
  let c ← sub x mu
  let sq ← square c
  let var ← meanAlongSubdag sq axis
  let e ← epsConst eps
  let t ← add var e
  let r ← rsqrt t
  let y ← mul c r
  pure y

-- outputs and graphs -------------------------------------------------------------

/-- Name node `x` as a graph output. -/
def output (name : String) (x : Nat) : DagM Nat := do
  let _ ← axesOf x
  modify fun b => { b with outputs := b.outputs.filter (fun p => p.1 != name) ++ [(name, x)] }
  pure x

end DSL

/-- Run `body` on a fresh builder; `body` declares its outputs with `output`. -/
def buildGraph (name : String) (axes : List (String × Nat)) (body : DagM Unit) :
    Except String Graph := do
  let r ← StateT.run body { name := name, axes := axes }
  let b := r.2
  pure { name := b.name, axes := b.axes, nodes := b.nodes.toList, outputs := b.outputs }

/-- The node `body` returns is the graph's output `"out"` (Python's
`build_graph_with_output`). -/
def buildGraphWithOutput (name : String) (axes : List (String × Nat)) (body : DagM Nat) :
    Except String Graph :=
  buildGraph name axes (do
    let x ← body
    let _ ← DSL.output "out" x
    pure ())

end LeanTile
