/-!
# LeanTile.IR — the graph IR ("leantile/v1")

Plain computable data, no Mathlib: named axes, ops, numbered nodes, graphs.
It mirrors `python/leantile/ir.py` field for field; `LeanTile.Export` writes it as
the same JSON bytes as the Python exporter.
-/

namespace LeanTile

/-- Storage element types. -/
inductive Dtype where
  | f16 | bf16 | f32 | f64
  deriving Repr, BEq, DecidableEq, Inhabited

def Dtype.name : Dtype → String
  | .f16 => "f16"
  | .bf16 => "bf16"
  | .f32 => "f32"
  | .f64 => "f64"

/-- Elementwise unary ops (cast is its own op because it carries a dtype). -/
inductive UnOp where
  | exp | exp2 | neg | square | sqrt | rsqrt | recip | silu | geluTanh
  deriving Repr, BEq, DecidableEq, Inhabited

def UnOp.name : UnOp → String
  | .exp => "exp"
  | .exp2 => "exp2"
  | .neg => "neg"
  | .square => "square"
  | .sqrt => "sqrt"
  | .rsqrt => "rsqrt"
  | .recip => "recip"
  | .silu => "silu"
  | .geluTanh => "gelu_tanh"

/-- Elementwise binary ops; they broadcast by axis name. -/
inductive BinOp where
  | add | sub | mul | div | max
  deriving Repr, BEq, DecidableEq, Inhabited

def BinOp.name : BinOp → String
  | .add => "add"
  | .sub => "sub"
  | .mul => "mul"
  | .div => "div"
  | .max => "max"

/-- Reductions along one named axis. -/
inductive RedKind where
  | sum | max
  deriving Repr, BEq, DecidableEq, Inhabited

def RedKind.name : RedKind → String
  | .sum => "sum"
  | .max => "max"

/-- One op. Arguments are ids of earlier nodes. Constants are decimal strings
(`"1e-05"`), never floats, so that Lean and Python print them identically. -/
inductive Op where
  | input (name : String) (dtype : Dtype)
  | const (value : String)
  | sizeConst (axis : String)
  | unary (op : UnOp) (x : Nat)
  | cast (x : Nat) (dtype : Dtype)
  | binary (op : BinOp) (a b : Nat)
  | reduce (kind : RedKind) (x : Nat) (axis : String)
  | matmul (a b : Nat) (axisA axisB : String)
  deriving Repr, BEq, Inhabited

/-- A node: its id (its position), its op and the named axes of its result. -/
structure Node where
  id : Nat
  op : Op
  axes : List String
  deriving Repr, BEq, Inhabited

/-- A graph: axis sizes, nodes in id order, named outputs. -/
structure Graph where
  name : String
  axes : List (String × Nat)
  nodes : List Node
  outputs : List (String × Nat)
  deriving Repr, Inhabited

/-- Broadcast by name: a's axes, then b's axes that a lacks (as `ir.binary_axes`). -/
def binaryAxes (a b : List String) : List String :=
  a ++ b.filter (fun x => !(a.contains x))

/-- a's free axes, then b's axes that are neither contracted nor shared with a's free
axes (as `ir.matmul_axes`). -/
def matmulAxes (a b : List String) (axisA axisB : String) : List String :=
  a.filter (fun x => x != axisA) ++
    b.filter (fun x => x != axisB && !((a.filter (fun y => y != axisA)).contains x))

end LeanTile
