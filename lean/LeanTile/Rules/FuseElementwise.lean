import LeanTile.Semantics

/-!
# Rule `fuse_elementwise`

The Python compiler (`leantile.derive`, rules `fuse_elementwise` and, for the map kernels of
`derive/rules/regions.py`, the same rule again) fuses any connected region of elementwise
nodes — unary, binary, select, cast, constants, iota — into ONE kernel loop: at every index
the kernel evaluates the region as an expression tree whose leaves are values loaded from
memory (the nodes the region does not recompute), literals and positions. Nothing in between
is written to memory.

This file states that this is correct for ANY region of ANY graph whose nodes read only
earlier nodes:

* `Region` is the expression tree a fused kernel evaluates; `Region.evalAt` evaluates it at
  one index, reading loaded nodes from the values the graph has computed.
* `Region.ofNode nodes inl fuel i` cuts the tree of node `i` out of the graph: a node with
  `inl j = true` is recomputed in registers (unfolded into its arguments), any other node is a
  load. `fuel` bounds the depth; where it runs out the node is loaded. The choice of `inl`
  (which nodes the kernel inlines, which it loads) is arbitrary.
* `fuse_elementwise_eval` (the theorem the rule cites): for every such cut, every root and
  every index, the fused evaluation equals the value `Graph.evalNodes` gives the root, i.e.
  the value of evaluating the nodes one by one in order with `evalOp`.

The trees may also contain reductions (`rsum`, `rmax`); `Rules/FuseReduction.lean` uses
that for a reduction kernel with its prologue and epilogue. Nothing here is checked by a Lean
toolchain yet (see docs/lean.md).
-/

namespace LeanTile

noncomputable section

-- Well-formed graphs and the values they compute ------------------------------------------

/-- Every node reads only earlier nodes (ids below its own position). The Python validator
(`ir.check`) and the builders (`DagM`) enforce it. -/
def Graph.Acyclic (g : Graph) : Prop :=
  ∀ (i : ℕ) (n : Node), g.nodes[i]? = some n → ∀ a ∈ n.op.args, a < i

/-- `vals` agrees with the nodes: the value of every node is its op evaluated on `vals`. -/
def Consistent (env : Env) (nodes : List Node) (vals : List Tensor) : Prop :=
  ∀ (i : ℕ) (n : Node), nodes[i]? = some n → getVal vals i = evalOp env vals n.op

/-- One step of `Graph.evalNodes`. -/
def evalStep (env : Env) (vals : List Tensor) (n : Node) : List Tensor :=
  vals ++ [evalOp env vals n.op]

theorem evalNodes_eq_foldl (g : Graph) (env : Env) :
    g.evalNodes env = g.nodes.foldl (evalStep env) [] := rfl

/-- An op reads only its arguments. -/
theorem evalOp_congr (env : Env) (vals vals' : List Tensor) (o : Op)
    (h : ∀ a ∈ o.args, getVal vals a = getVal vals' a) :
    evalOp env vals o = evalOp env vals' o := by
  cases o with
  | input name dt => rfl
  | const v => rfl
  | sizeConst a => rfl
  | iota a => rfl
  | unary u x =>
    have hx : getVal vals x = getVal vals' x := h x (by simp [Op.args])
    show (fun ι => u.eval (getVal vals x ι)) = (fun ι => u.eval (getVal vals' x ι))
    rw [hx]
  | cast x dt =>
    have hx : getVal vals x = getVal vals' x := h x (by simp [Op.args])
    exact hx
  | binary b x y =>
    have hx : getVal vals x = getVal vals' x := h x (by simp [Op.args])
    have hy : getVal vals y = getVal vals' y := h y (by simp [Op.args])
    show (fun ι => b.eval (getVal vals x ι) (getVal vals y ι)) =
      (fun ι => b.eval (getVal vals' x ι) (getVal vals' y ι))
    rw [hx, hy]
  | select c x y =>
    have hc : getVal vals c = getVal vals' c := h c (by simp [Op.args])
    have hx : getVal vals x = getVal vals' x := h x (by simp [Op.args])
    have hy : getVal vals y = getVal vals' y := h y (by simp [Op.args])
    show (fun ι => selectVal (getVal vals c ι) (getVal vals x ι) (getVal vals y ι)) =
      (fun ι => selectVal (getVal vals' c ι) (getVal vals' x ι) (getVal vals' y ι))
    rw [hc, hx, hy]
  | reduce k x a =>
    have hx : getVal vals x = getVal vals' x := h x (by simp [Op.args])
    cases k with
    | sum =>
      show sumAlong (env.size a) a (getVal vals x) = sumAlong (env.size a) a (getVal vals' x)
      rw [hx]
    | max =>
      show maxAlong (env.size a) a (getVal vals x) = maxAlong (env.size a) a (getVal vals' x)
      rw [hx]
  | matmul x y axA axB =>
    have hx : getVal vals x = getVal vals' x := h x (by simp [Op.args])
    have hy : getVal vals y = getVal vals' y := h y (by simp [Op.args])
    show contract (env.size axA) axA axB (getVal vals x) (getVal vals y) =
      contract (env.size axA) axA axB (getVal vals' x) (getVal vals' y)
    rw [hx, hy]

/-- Reading inside a prefix (proved here by induction, so as not to depend on the exact name
of the core lemma `List.getElem?_append_left`). -/
theorem getElem?_append_of_lt {α : Type} (l r : List α) (a : ℕ) (h : a < l.length) :
    (l ++ r)[a]? = l[a]? := by
  induction l generalizing a with
  | nil => simp at h
  | cons x l ih =>
    cases a with
    | zero =>
      first
        | rfl
        | simp
    | succ a =>
      have h' : a < l.length := by simp at h; omega
      first
        | exact ih a h'
        | (simp only [List.cons_append, List.getElem?_cons_succ]; exact ih a h')

/-- The last element of `l ++ [e]` sits at position `l.length`. -/
theorem getElem?_concat_self {α : Type} (l : List α) (e : α) : (l ++ [e])[l.length]? = some e := by
  induction l with
  | nil => rfl
  | cons x l ih =>
    first
      | exact ih
      | simpa using ih

theorem getVal_append_left (l r : List Tensor) (a : ℕ) (h : a < l.length) :
    getVal (l ++ r) a = getVal l a := by
  unfold getVal
  rw [getElem?_append_of_lt l r a h]

theorem getVal_append_singleton (l r : List Tensor) (e : Tensor) :
    getVal ((l ++ [e]) ++ r) l.length = e := by
  have h : l.length < (l ++ [e]).length := by simp
  rw [getVal_append_left _ _ _ h]
  unfold getVal
  rw [getElem?_concat_self l e] <;> rfl

/-- Evaluating more nodes only appends values. -/
theorem foldl_evalStep_prefix (env : Env) (L : List Node) (acc : List Tensor) :
    ∃ rest, L.foldl (evalStep env) acc = acc ++ rest := by
  induction L generalizing acc with
  | nil => exact ⟨[], by simp⟩
  | cons m L ih =>
    obtain ⟨rest, h⟩ := ih (evalStep env acc m)
    exact ⟨[evalOp env acc m.op] ++ rest, by rw [List.foldl_cons, h, evalStep, List.append_assoc]⟩

/-- The value at position `acc.length + j` of the evaluation of `L` after `acc` is node `j`'s
op evaluated on the final values, provided node `j` reads only earlier positions. -/
theorem foldl_evalStep_get (env : Env) (L : List Node) :
    ∀ (acc : List Tensor) (j : ℕ) (n : Node), L[j]? = some n →
      (∀ a ∈ n.op.args, a < acc.length + j) →
      getVal (L.foldl (evalStep env) acc) (acc.length + j) =
        evalOp env (L.foldl (evalStep env) acc) n.op := by
  induction L with
  | nil =>
    intro acc j n hj _
    simp at hj
  | cons m L ih =>
    intro acc j n hj hargs
    rw [List.foldl_cons]
    cases j with
    | zero =>
      -- node 0 of `m :: L` is `m`: read it off `hj` (the core lemma is `rfl` in current Lean;
      -- the later branches only in case its name or form drifts)
      have hmn : m = n := by
        first
          | (rw [List.getElem?_cons_zero] at hj; exact Option.some.inj hj)
          | exact Option.some.inj hj
          | simpa using hj
      subst n
      -- its arguments sit below `acc.length` (`acc.length + 0`, by `Nat.add_zero`)
      have hlt : ∀ a ∈ m.op.args, a < acc.length := by
        intro a ha
        have h0 : a < acc.length + 0 := hargs a ha
        rw [Nat.add_zero] at h0
        exact h0
      obtain ⟨rest, hrest⟩ := foldl_evalStep_prefix env L (evalStep env acc m)
      rw [hrest]
      show getVal ((acc ++ [evalOp env acc m.op]) ++ rest) acc.length =
        evalOp env ((acc ++ [evalOp env acc m.op]) ++ rest) m.op
      rw [getVal_append_singleton acc rest (evalOp env acc m.op)]
      apply evalOp_congr
      intro a ha
      rw [List.append_assoc, getVal_append_left acc _ a (hlt a ha)]
    | succ j =>
      have hj' : L[j]? = some n := by
        first
          | (rw [List.getElem?_cons_succ] at hj; exact hj)
          | exact hj
          | simpa using hj
      have hidx : (evalStep env acc m).length + j = acc.length + (j + 1) := by
        first
          | (show (acc ++ [evalOp env acc m.op]).length + j = acc.length + (j + 1)
             rw [List.length_append, List.length_singleton, Nat.add_assoc, Nat.add_comm 1 j])
          | (simp only [evalStep, List.length_append, List.length_singleton]; omega)
      have key := ih (evalStep env acc m) j n hj' (by
        intro a ha
        rw [hidx]
        exact hargs a ha)
      rw [hidx] at key
      exact key

/-- In an acyclic graph, `Graph.evalNodes` agrees with every node. -/
theorem evalNodes_consistent (g : Graph) (env : Env) (hg : g.Acyclic) :
    Consistent env g.nodes (g.evalNodes env) := by
  intro i n hn
  have key := foldl_evalStep_get env g.nodes [] i n hn (by
    intro a ha
    rw [List.length_nil, Nat.zero_add]
    exact hg i n hn a ha)
  rw [List.length_nil, Nat.zero_add] at key
  exact key

-- Regions ------------------------------------------------------------------------------

/-- What a fused kernel evaluates at one index: an expression tree over loaded values
(`load i`: node `i`'s value read from memory), literals (`lit`, `size`), positions (`iota`)
and elementwise ops; `rsum` / `rmax` are a reduction computed inside the kernel (its loop over
the reduced axis), used by `Rules/FuseReduction.lean`. Casts are not nodes of the tree: the
semantics is exact real arithmetic, where a cast is the identity. -/
inductive Region where
  | load (i : ℕ)
  | lit (v : String)
  | size (a : String)
  | iota (a : String)
  | un (u : UnOp) (x : Region)
  | bin (b : BinOp) (x y : Region)
  | sel (c x y : Region)
  | rsum (a : String) (x : Region)
  | rmax (a : String) (x : Region)

/-- The fused evaluation: at index `ι`, loads read `vals` (the values in memory), every other
node is computed on the spot from its children at the same index (a reduction loops over its
axis). -/
def Region.evalAt (env : Env) (vals : List Tensor) : Region → Tensor
  | .load i => getVal vals i
  | .lit v => fun _ => env.const v
  | .size a => fun _ => (env.size a : ℝ)
  | .iota a => fun ι => (ι a : ℝ)
  | .un u x => fun ι => u.eval (Region.evalAt env vals x ι)
  | .bin b x y => fun ι => b.eval (Region.evalAt env vals x ι) (Region.evalAt env vals y ι)
  | .sel c x y => fun ι =>
    selectVal (Region.evalAt env vals c ι) (Region.evalAt env vals x ι) (Region.evalAt env vals y ι)
  | .rsum a x => sumAlong (env.size a) a (Region.evalAt env vals x)
  | .rmax a x => maxAlong (env.size a) a (Region.evalAt env vals x)

/-- Unfold one node (`i`, op `o`) into the tree, its arguments given by `child`; an op that is
not computed in registers (an input, a matmul) becomes a load. -/
def Region.unfoldOp (child : ℕ → Region) (i : ℕ) : Op → Region
  | .input _ _ => .load i
  | .const v => .lit v
  | .sizeConst a => .size a
  | .iota a => .iota a
  | .unary u x => .un u (child x)
  | .cast x _ => child x
  | .binary b x y => .bin b (child x) (child y)
  | .select c x y => .sel (child c) (child x) (child y)
  | .reduce .sum x a => .rsum a (child x)
  | .reduce .max x a => .rmax a (child x)
  | .matmul _ _ _ _ => .load i

/-- The tree of node `i`: nodes with `inl j = true` are unfolded (recomputed in the kernel),
the others are loads; at most `fuel` levels deep (then a load). -/
def Region.ofNode (nodes : List Node) (inl : ℕ → Bool) : ℕ → ℕ → Region
  | 0, i => .load i
  | fuel + 1, i =>
    if inl i then
      match nodes[i]? with
      | some n => Region.unfoldOp (fun j => Region.ofNode nodes inl fuel j) i n.op
      | none => .load i
    else .load i

/-- Unfolding one node is correct when its children are. -/
theorem Region.unfoldOp_evalAt (env : Env) (vals : List Tensor) (child : ℕ → Region)
    (hchild : ∀ j, Region.evalAt env vals (child j) = getVal vals j) (i : ℕ) (o : Op)
    (hi : getVal vals i = evalOp env vals o) :
    Region.evalAt env vals (Region.unfoldOp child i o) = evalOp env vals o := by
  cases o with
  | input name dt => exact hi
  | const v => rfl
  | sizeConst a => rfl
  | iota a => rfl
  | unary u x =>
    show (fun ι => u.eval (Region.evalAt env vals (child x) ι)) =
      (fun ι => u.eval (getVal vals x ι))
    rw [hchild x]
  | cast x dt =>
    show Region.evalAt env vals (child x) = getVal vals x
    exact hchild x
  | binary b x y =>
    show (fun ι => b.eval (Region.evalAt env vals (child x) ι) (Region.evalAt env vals (child y) ι)) =
      (fun ι => b.eval (getVal vals x ι) (getVal vals y ι))
    rw [hchild x, hchild y]
  | select c x y =>
    show (fun ι => selectVal (Region.evalAt env vals (child c) ι) (Region.evalAt env vals (child x) ι)
        (Region.evalAt env vals (child y) ι)) =
      (fun ι => selectVal (getVal vals c ι) (getVal vals x ι) (getVal vals y ι))
    rw [hchild c, hchild x, hchild y]
  | reduce k x a =>
    cases k with
    | sum =>
      show sumAlong (env.size a) a (Region.evalAt env vals (child x)) =
        sumAlong (env.size a) a (getVal vals x)
      rw [hchild x]
    | max =>
      show maxAlong (env.size a) a (Region.evalAt env vals (child x)) =
        maxAlong (env.size a) a (getVal vals x)
      rw [hchild x]
  | matmul x y axA axB => exact hi

/-- Any cut of any node's tree evaluates to the node's value, as a tensor, whenever `vals`
agrees with the nodes. -/
theorem Region.ofNode_evalAt (env : Env) (nodes : List Node) (vals : List Tensor)
    (hc : Consistent env nodes vals) (inl : ℕ → Bool) (fuel : ℕ) :
    ∀ i, Region.evalAt env vals (Region.ofNode nodes inl fuel i) = getVal vals i := by
  induction fuel with
  | zero => intro i; rfl
  | succ fuel ih =>
    intro i
    cases hb : inl i with
    | false =>
      have e : Region.ofNode nodes inl (fuel + 1) i = .load i := by
        first
          | (rw [Region.ofNode, hb] <;> rfl)
          | simp [Region.ofNode, hb]
      exact (congrArg (Region.evalAt env vals) e).trans rfl
    | true =>
      cases hn : nodes[i]? with
      | none =>
        have e : Region.ofNode nodes inl (fuel + 1) i = .load i := by
          first
            | (rw [Region.ofNode, hb, hn] <;> rfl)
            | simp [Region.ofNode, hb, hn]
        exact (congrArg (Region.evalAt env vals) e).trans rfl
      | some n =>
        have e : Region.ofNode nodes inl (fuel + 1) i =
            Region.unfoldOp (fun j => Region.ofNode nodes inl fuel j) i n.op := by
          first
            | (rw [Region.ofNode, hb, hn] <;> rfl)
            | simp [Region.ofNode, hb, hn]
        exact (congrArg (Region.evalAt env vals) e).trans
          ((Region.unfoldOp_evalAt env vals (fun j => Region.ofNode nodes inl fuel j) ih i n.op
            (hc i n hn)).trans (hc i n hn).symm)

/-- **Fused elementwise region** (cited by rule `fuse_elementwise`). In a graph whose nodes
read only earlier nodes, cut any region out of it (`inl`: the nodes the kernel recomputes in
registers; every other node it reads is loaded from memory) and evaluate it pointwise: at
every index `ι` the fused value of the region rooted at `root` equals the value that
evaluating the graph's nodes one by one in order (`Graph.evalNodes`, i.e. `evalOp` node by
node) gives `root`. -/
theorem fuse_elementwise_eval (g : Graph) (env : Env) (hg : g.Acyclic) (inl : ℕ → Bool)
    (fuel root : ℕ) (ι : Idx) :
    Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel root) ι =
      getVal (g.evalNodes env) root ι :=
  congrFun (Region.ofNode_evalAt env g.nodes (g.evalNodes env) (evalNodes_consistent g env hg)
    inl fuel root) ι

/-- The same as tensors (the whole kernel output equals the node's value). -/
theorem fuse_elementwise_tensor (g : Graph) (env : Env) (hg : g.Acyclic) (inl : ℕ → Bool)
    (fuel root : ℕ) :
    Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel root) =
      getVal (g.evalNodes env) root :=
  Region.ofNode_evalAt env g.nodes (g.evalNodes env) (evalNodes_consistent g env hg) inl fuel root

-- The two-map special cases (definitional) -----------------------------------------------

/-- Two elementwise maps evaluate as one pointwise map. -/
theorem fuse_map_map (f g : ℝ → ℝ) (t : Tensor) :
    mapT g (mapT f t) = mapT (g ∘ f) t := rfl

/-- The binary form: a zip of two maps is one fused zip. -/
theorem fuse_elementwise_eval₂ (h : ℝ → ℝ → ℝ) (f g : ℝ → ℝ) (s t : Tensor) :
    zipT h (mapT f s) (mapT g t) = zipT (fun a b => h (f a) (g b)) s t := rfl

/-- Pointwise: the fused value at an index is the composed function at that index. -/
theorem fuse_elementwise_apply (f g : ℝ → ℝ) (t : Tensor) (ι : Idx) :
    mapT g (mapT f t) ι = g (f (t ι)) := rfl

end

end LeanTile
