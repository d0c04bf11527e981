import LeanTile.IR
import LeanTile.Derivation

/-!
# LeanTile.Export — graph + derivation as "leantile/v1" JSON

Byte layout shared with `python/leantile/ir.py` (`Graph.to_json`): compact JSON, every
object's keys sorted, ASCII only (`ensure_ascii`), one trailing newline.

We do not use `Lean.Json.compress`: in the Lean sources we read (src/Lean/Data/Json/
Printer.lean) it conses object fields onto a list during an in-order fold of the RBNode,
so it prints keys in DESCENDING order. A tiny renderer here sorts keys ascending by code
point (Python's `sort_keys`) and escapes strings like Python's `json.dumps`.
-/

namespace LeanTile.Export

/-- The JSON subset we write. -/
inductive J where
  | str (s : String)
  | nat (n : Nat)
  | arr (xs : List J)
  | obj (kvs : List (String × J))

def hexDigit (n : Nat) : Char := Nat.digitChar (n % 16)

/-- Four lowercase hex digits (Python writes `\u00e9`). -/
def hex4 (n : Nat) : String :=
  ((("".push (hexDigit (n / 4096))).push (hexDigit (n / 256))).push (hexDigit (n / 16))).push
    (hexDigit n)

/-- One character as Python's `json.dumps(..., ensure_ascii=True)` writes it. -/
def escapeChar (c : Char) : String :=
  let n := c.toNat
  if n == 34 then "\\\""
  else if n == 92 then "\\\\"
  else if n == 10 then "\\n"
  else if n == 13 then "\\r"
  else if n == 9 then "\\t"
  else if n == 8 then "\\b"
  else if n == 12 then "\\f"
  else if 32 ≤ n ∧ n ≤ 126 then "".push c
  else if n < 65536 then "\\u" ++ hex4 n
  else "\\u" ++ hex4 (55296 + (n - 65536) / 1024) ++ "\\u" ++ hex4 (56320 + (n - 65536) % 1024)

def quote (s : String) : String :=
  "\"" ++ s.toList.foldl (fun acc c => acc ++ escapeChar c) "" ++ "\""

/-- Code-point order on strings (Python's `sort_keys`). -/
def charsLt : List Char → List Char → Bool
  | [], [] => false
  | [], _ :: _ => true
  | _ :: _, [] => false
  | a :: as, b :: bs =>
    if a.toNat < b.toNat then true
    else if b.toNat < a.toNat then false
    else charsLt as bs

def insertKV (kv : String × J) : List (String × J) → List (String × J)
  | [] => [kv]
  | x :: xs => if charsLt kv.1.toList x.1.toList then kv :: x :: xs else x :: insertKV kv xs

def sortKVs (kvs : List (String × J)) : List (String × J) :=
  kvs.foldr insertKV []

/-- Join with commas. -/
def commaSep : List String → String
  | [] => ""
  | [s] => s
  | s :: ss => s ++ "," ++ commaSep ss

/-- Compact rendering with sorted keys. -/
partial def render : J → String
  | .str s => quote s
  | .nat n => toString n
  | .arr xs => "[" ++ commaSep (xs.map render) ++ "]"
  | .obj kvs => "{" ++ commaSep ((sortKVs kvs).map (fun kv => quote kv.1 ++ ":" ++ render kv.2)) ++ "}"

/-- The op-specific fields of a node (as the pydantic models in `ir.py`). -/
def opFields : Op → List (String × J)
  | .input name dt => [("op", .str "input"), ("name", .str name), ("dtype", .str dt.name)]
  | .const v => [("op", .str "const"), ("value", .str v)]
  | .sizeConst a => [("op", .str "sizeConst"), ("axis", .str a)]
  | .iota a => [("op", .str "iota"), ("axis", .str a)]
  | .unary u x => [("op", .str u.name), ("x", .nat x)]
  | .cast x dt => [("op", .str "cast"), ("x", .nat x), ("dtype", .str dt.name)]
  | .binary b x y => [("op", .str b.name), ("a", .nat x), ("b", .nat y)]
  | .select c x y => [("op", .str "select"), ("cond", .nat c), ("a", .nat x), ("b", .nat y)]
  | .reduce k x a => [("op", .str "reduce"), ("kind", .str k.name), ("x", .nat x), ("axis", .str a)]
  | .matmul x y aa ab =>
    [("op", .str "matmul"), ("a", .nat x), ("b", .nat y), ("axis_a", .str aa), ("axis_b", .str ab)]

def nodeJ (n : Node) : J :=
  .obj (([("id", .nat n.id), ("axes", .arr (n.axes.map J.str))] : List (String × J)) ++ opFields n.op)

def paramJ (v : ParamValue) : J :=
  match v with
  | .str s => .str s
  | .nat k => .nat k

def stepJ (s : Step) : J :=
  .obj [ ("rule", .str s.rule), ("theorem", .str s.thm), ("at", .arr (s.sites.map J.nat))
       , ("params", .obj (s.params.map (fun p => (p.1, paramJ p.2)))) ]

def graphJ (g : Graph) (steps : List Step) : J :=
  .obj [ ("schema", .str "leantile/v1"), ("name", .str g.name)
       , ("axes", .obj (g.axes.map (fun p => (p.1, J.nat p.2))))
       , ("nodes", .arr (g.nodes.map nodeJ))
       , ("outputs", .obj (g.outputs.map (fun p => (p.1, J.nat p.2))))
       , ("derivation", .arr (steps.map stepJ)) ]

/-- `ir.IDENTIFIER` of the Python side, `^[A-Za-z_][A-Za-z0-9_]*$`, at most 64 characters
(`ir.MAX_NAME`). Every name of a graph reaches file names, generated Python and CUDA, and
reports; an identifier is safe in all of them. `Char.isAlpha` / `isAlphanum` are ASCII-only. -/
def isIdent (s : String) : Bool :=
  match s.toList with
  | [] => false
  | c :: cs => (c.isAlpha || c == '_') && cs.all (fun d => d.isAlphanum || d == '_') && decide (s.length ≤ 64)

/-- Every name in the graph: its own, its axes', its inputs' and its outputs'. -/
def graphNames (g : Graph) : List String :=
  [g.name] ++ g.axes.map (·.1) ++ g.outputs.map (·.1) ++
    g.nodes.filterMap (fun n => match n.op with
      | .input name _ => some name
      | _ => none)

/-- The names the exporter refuses (the Python validator refuses the same ones). -/
def badNames (g : Graph) : List String :=
  (graphNames g).filter (fun s => !isIdent s)

/-- The exact bytes `leantile export` writes for this graph. -/
def graphJson (g : Graph) (steps : List Step) : String :=
  render (graphJ g steps) ++ "\n"

end LeanTile.Export
