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
  | log | tanh | erf | sigmoid | abs
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
  | .log => "log"
  | .tanh => "tanh"
  | .erf => "erf"
  | .sigmoid => "sigmoid"
  | .abs => "abs"

/-- Elementwise binary ops; they broadcast by axis name. The comparisons `lt le eq ge gt`
give 1 where they hold and 0 elsewhere. -/
inductive BinOp where
  | add | sub | mul | div | max | min | lt | le | eq | ge | gt
  deriving Repr, BEq, DecidableEq, Inhabited

def BinOp.name : BinOp → String
  | .add => "add"
  | .sub => "sub"
  | .mul => "mul"
  | .div => "div"
  | .max => "max"
  | .min => "min"
  | .lt => "lt"
  | .le => "le"
  | .eq => "eq"
  | .ge => "ge"
  | .gt => "gt"

/-- Reductions along one named axis. -/
inductive RedKind where
  | sum | max
  deriving Repr, BEq, DecidableEq, Inhabited

def RedKind.name : RedKind → String
  | .sum => "sum"
  | .max => "max"

/-- One op. Arguments are ids of earlier nodes. Constants are decimal strings
(`"1e-05"`), never floats, so that Lean and Python print them identically.
`select cond a b` is `a` where `cond ≠ 0`, else `b` (`torch.where(cond != 0, a, b)`);
`iota axis` is the position along `axis` (0, 1, …, n-1), a leaf with axes `[axis]`. -/
inductive Op where
  | input (name : String) (dtype : Dtype)
  | const (value : String)
  | sizeConst (axis : String)
  | iota (axis : String)
  | unary (op : UnOp) (x : Nat)
  | cast (x : Nat) (dtype : Dtype)
  | binary (op : BinOp) (a b : Nat)
  | select (cond a b : Nat)
  | reduce (kind : RedKind) (x : Nat) (axis : String)
  | matmul (a b : Nat) (axisA axisB : String)
  deriving Repr, BEq, Inhabited

/-- The ids of the nodes an op reads (as `ir._Node.args`; `select` reads cond, a, b). -/
def Op.args : Op → List Nat
  | .input _ _ => []
  | .const _ => []
  | .sizeConst _ => []
  | .iota _ => []
  | .unary _ x => [x]
  | .cast x _ => [x]
  | .binary _ a b => [a, b]
  | .select c a b => [c, a, b]
  | .reduce _ x _ => [x]
  | .matmul a b _ _ => [a, b]

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

/-- a's axes, then b's that a lacks, then cond's that neither has (as `ir.select_axes`). -/
def selectAxes (cond a b : List String) : List String :=
  binaryAxes (binaryAxes a b) cond

/-- a's free axes, then b's axes that are neither contracted nor shared with a's free
axes (as `ir.matmul_axes`). -/
def matmulAxes (a b : List String) (axisA axisB : String) : List String :=
  a.filter (fun x => x != axisA) ++
    b.filter (fun x => x != axisB && !((a.filter (fun y => y != axisA)).contains x))

end LeanTile
