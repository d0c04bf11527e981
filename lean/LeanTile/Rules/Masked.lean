import LeanTile.Rules.Common
import LeanTile.Rules.FuseElementwise

/-!
# The masked semantics: what it agrees with, and where a mask makes a score −∞

`LeanTile.Semantics` gives every graph its meaning in `Graph.evalM`, over values that are a
real, `masked` (the −∞ of the constant `"-inf"`) or `undef`. This file proves the two facts the
rules need about it:

* `evalM_eq_eval`, `evalNodesM_eq_map`: on a graph without the constant `"-inf"`, the masked
  semantics IS the real one (`Graph.eval`), every value wrapped in `val`. So every lemma stated
  over `Graph.eval` / `Graph.evalNodes` (fuse_elementwise, fuse_reduction, ...) speaks about the
  meaning of such graphs.
* `evalNodesM_consistent` (the masked twin of `evalNodes_consistent`): in an acyclic graph
  every node's value is its op applied to the values of the earlier nodes. From it, node by
  node: a `const "-inf"` node is `masked` everywhere (`node_const_neginf`), a
  `select keep s ninf` node is its third argument where `keep` is 0 (`node_select_drop`), a
  `div x c` node is `masked` where `x` is and `c > 0` (`node_div_masked`); together
  (`masked_score_node`): the scores `select(keep, s, -inf) / scale` of masked attention are
  `masked` exactly where the mask drops the key. `Rules/MaskSkip.lean` folds those scores.

Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

noncomputable section

-- The real semantics inside the masked one ------------------------------------------------

/-- `(vals.map liftT)[i]? = (vals[i]?).map liftT`, by induction (no dependence on the name of
the core lemma). -/
theorem getElem?_map_liftT : ∀ (vals : List Tensor) (i : ℕ),
    (vals.map liftT)[i]? = (vals[i]?).map liftT
  | [], _ => rfl
  | _ :: _, 0 => rfl
  | _ :: vals, i + 1 => getElem?_map_liftT vals i

theorem getValM_map (vals : List Tensor) (i : ℕ) : getValM (vals.map liftT) i = liftT (getVal vals i) := by
  unfold getValM getVal
  rw [getElem?_map_liftT]
  cases h : vals[i]? with
  | none => rfl
  | some t => rfl

/-- A sum of reals in the masked semantics is the real sum. -/
theorem foldl_addM_val (L : List ℕ) (f : ℕ → ℝ) (s : ℝ) :
    L.foldl (fun acc k => BinOp.evalM .add acc (.val (f k))) (.val s) = .val (s + (L.map f).sum) := by
  induction L generalizing s with
  | nil => rw [List.foldl_nil, List.map_nil, List.sum_nil, add_zero]
  | cons k L ih =>
    rw [List.foldl_cons, List.map_cons, List.sum_cons, ← add_assoc]
    exact ih (s + f k)

/-- A max of reals in the masked semantics is the real max. -/
theorem foldl_maxM_val (L : List ℕ) (f : ℕ → ℝ) (s : ℝ) :
    L.foldl (fun m k => BinOp.evalM .max m (.val (f k))) (.val s) =
      .val (L.foldl (fun m k => max m (f k)) s) := by
  induction L generalizing s with
  | nil => rfl
  | cons k L ih => exact ih (max s (f k))

theorem sumAlongM_liftT (n : ℕ) (a : String) (t : Tensor) (ι : Idx) :
    sumAlongM n a (liftT t) ι = .val (sumAlong n a t ι) := by
  show (List.range n).foldl (fun acc k => BinOp.evalM .add acc (.val (t (Function.update ι a k)))) (.val 0) =
    MVal.val (∑ k ∈ Finset.range n, t (Function.update ι a k))
  rw [foldl_addM_val, zero_add, list_sum_range]

theorem maxAlongM_liftT (n : ℕ) (a : String) (t : Tensor) (ι : Idx) :
    maxAlongM n a (liftT t) ι = .val (maxAlong n a t ι) :=
  foldl_maxM_val (List.range n) (fun k => t (Function.update ι a k)) (t (Function.update ι a 0))

theorem contractM_liftT (n : ℕ) (axA axB : String) (x y : Tensor) (ι : Idx) :
    contractM n axA axB (liftT x) (liftT y) ι = .val (contract n axA axB x y ι) := by
  show (List.range n).foldl
      (fun acc k => BinOp.evalM .add acc (.val (x (Function.update ι axA k) * y (Function.update ι axB k))))
      (.val 0) =
    MVal.val (∑ k ∈ Finset.range n, x (Function.update ι axA k) * y (Function.update ι axB k))
  rw [foldl_addM_val, zero_add, list_sum_range]

/-- Every op but `const "-inf"` means in the masked semantics what it means over ℝ, when its
arguments are reals. -/
theorem evalOpM_liftT (env : Env) (vals : List Tensor) (o : Op) (ho : o ≠ .const "-inf") :
    evalOpM env (vals.map liftT) o = liftT (evalOp env vals o) := by
  funext ι
  cases o with
  | input name dt => rfl
  | const v =>
    have hv : v ≠ "-inf" := fun h => ho (congrArg Op.const h)
    exact constM_real env v hv
  | sizeConst a => rfl
  | iota a => rfl
  | unary u x =>
    show u.evalM (getValM (vals.map liftT) x ι) = MVal.val (u.eval (getVal vals x ι))
    rw [getValM_map] <;> rfl
  | cast x dt =>
    show getValM (vals.map liftT) x ι = MVal.val (getVal vals x ι)
    rw [getValM_map] <;> rfl
  | binary b x y =>
    show b.evalM (getValM (vals.map liftT) x ι) (getValM (vals.map liftT) y ι) =
      MVal.val (b.eval (getVal vals x ι) (getVal vals y ι))
    rw [getValM_map, getValM_map] <;> rfl
  | select c x y =>
    show selectM (getValM (vals.map liftT) c ι) (getValM (vals.map liftT) x ι) (getValM (vals.map liftT) y ι) =
      MVal.val (selectVal (getVal vals c ι) (getVal vals x ι) (getVal vals y ι))
    rw [getValM_map, getValM_map, getValM_map] <;> exact selectM_val _ _ _
  | reduce k x a =>
    cases k with
    | sum =>
      show sumAlongM (env.size a) a (getValM (vals.map liftT) x) ι =
        MVal.val (sumAlong (env.size a) a (getVal vals x) ι)
      rw [getValM_map] <;> exact sumAlongM_liftT _ _ _ _
    | max =>
      show maxAlongM (env.size a) a (getValM (vals.map liftT) x) ι =
        MVal.val (maxAlong (env.size a) a (getVal vals x) ι)
      rw [getValM_map] <;> exact maxAlongM_liftT _ _ _ _
  | matmul x y axA axB =>
    show contractM (env.size axA) axA axB (getValM (vals.map liftT) x) (getValM (vals.map liftT) y) ι =
      MVal.val (contract (env.size axA) axA axB (getVal vals x) (getVal vals y) ι)
    rw [getValM_map, getValM_map] <;> exact contractM_liftT _ _ _ _ _ _

/-- One node of the masked evaluation. -/
def evalStepM (env : Env) (vals : List MTensor) (n : Node) : List MTensor :=
  vals ++ [evalOpM env vals n.op]

theorem evalNodesM_eq_foldl (g : Graph) (env : Env) :
    g.evalNodesM env = g.nodes.foldl (evalStepM env) [] := rfl

/-- No node of the graph is the constant `"-inf"` (a graph without a mask). -/
def Graph.NoNegInf (g : Graph) : Prop := ∀ n ∈ g.nodes, n.op ≠ .const "-inf"

theorem foldl_evalStepM_liftT (env : Env) : ∀ (L : List Node) (vals : List Tensor),
    (∀ n ∈ L, n.op ≠ .const "-inf") →
      L.foldl (evalStepM env) (vals.map liftT) = (L.foldl (evalStep env) vals).map liftT := by
  intro L
  induction L with
  | nil => intro vals _; rfl
  | cons n L ih =>
    intro vals h
    have hn : n.op ≠ .const "-inf" := h n (List.mem_cons.2 (Or.inl rfl))
    have e : evalStepM env (vals.map liftT) n = (evalStep env vals n).map liftT := by
      show vals.map liftT ++ [evalOpM env (vals.map liftT) n.op] =
        (vals ++ [evalOp env vals n.op]).map liftT
      rw [evalOpM_liftT env vals n.op hn, List.map_append, List.map_cons, List.map_nil]
    rw [List.foldl_cons, List.foldl_cons, e]
    exact ih (evalStep env vals n) (fun m hm => h m (List.mem_cons.2 (Or.inr hm)))

/-- On a graph without `"-inf"`, the masked semantics computes the real values, node by node. -/
theorem evalNodesM_eq_map (g : Graph) (env : Env) (h : g.NoNegInf) :
    g.evalNodesM env = (g.evalNodes env).map liftT :=
  foldl_evalStepM_liftT env g.nodes [] h

/-- **The real semantics is the masked one without masks.** On a graph without the constant
`"-inf"`, `Graph.evalM` is `Graph.eval` with every value a real: the lemmas stated over
`Graph.eval` describe the meaning of such graphs. -/
theorem evalM_eq_eval (g : Graph) (env : Env) (h : g.NoNegInf) (out : String) :
    g.evalM env out = liftT (g.eval env out) := by
  unfold Graph.evalM Graph.eval
  cases hl : List.lookup out g.outputs with
  | none => rfl
  | some i =>
    show getValM (g.evalNodesM env) i = liftT (getVal (g.evalNodes env) i)
    rw [evalNodesM_eq_map g env h, getValM_map]

-- Node by node in the masked semantics ------------------------------------------------------

/-- `vals` agrees with the nodes in the masked semantics. -/
def ConsistentM (env : Env) (nodes : List Node) (vals : List MTensor) : Prop :=
  ∀ (i : ℕ) (n : Node), nodes[i]? = some n → getValM vals i = evalOpM env vals n.op

/-- An op reads only its arguments (masked semantics). -/
theorem evalOpM_congr (env : Env) (vals vals' : List MTensor) (o : Op)
    (h : ∀ a ∈ o.args, getValM vals a = getValM vals' a) :
    evalOpM env vals o = evalOpM env vals' o := by
  cases o with
  | input name dt => rfl
  | const v => rfl
  | sizeConst a => rfl
  | iota a => rfl
  | unary u x =>
    have hx : getValM vals x = getValM vals' x := h x (List.mem_cons.2 (Or.inl rfl))
    show (fun ι => u.evalM (getValM vals x ι)) = (fun ι => u.evalM (getValM vals' x ι))
    rw [hx]
  | cast x dt =>
    exact h x (List.mem_cons.2 (Or.inl rfl))
  | binary b x y =>
    have hx : getValM vals x = getValM vals' x := h x (List.mem_cons.2 (Or.inl rfl))
    have hy : getValM vals y = getValM vals' y :=
      h y (List.mem_cons.2 (Or.inr (List.mem_cons.2 (Or.inl rfl))))
    show (fun ι => b.evalM (getValM vals x ι) (getValM vals y ι)) =
      (fun ι => b.evalM (getValM vals' x ι) (getValM vals' y ι))
    rw [hx, hy]
  | select c x y =>
    have hc : getValM vals c = getValM vals' c := h c (List.mem_cons.2 (Or.inl rfl))
    have hx : getValM vals x = getValM vals' x :=
      h x (List.mem_cons.2 (Or.inr (List.mem_cons.2 (Or.inl rfl))))
    have hy : getValM vals y = getValM vals' y :=
      h y (List.mem_cons.2 (Or.inr (List.mem_cons.2 (Or.inr (List.mem_cons.2 (Or.inl rfl))))))
    show (fun ι => selectM (getValM vals c ι) (getValM vals x ι) (getValM vals y ι)) =
      (fun ι => selectM (getValM vals' c ι) (getValM vals' x ι) (getValM vals' y ι))
    rw [hc, hx, hy]
  | reduce k x a =>
    have hx : getValM vals x = getValM vals' x := h x (List.mem_cons.2 (Or.inl rfl))
    cases k with
    | sum =>
      show sumAlongM (env.size a) a (getValM vals x) = sumAlongM (env.size a) a (getValM vals' x)
      rw [hx]
    | max =>
      show maxAlongM (env.size a) a (getValM vals x) = maxAlongM (env.size a) a (getValM vals' x)
      rw [hx]
  | matmul x y axA axB =>
    have hx : getValM vals x = getValM vals' x := h x (List.mem_cons.2 (Or.inl rfl))
    have hy : getValM vals y = getValM vals' y :=
      h y (List.mem_cons.2 (Or.inr (List.mem_cons.2 (Or.inl rfl))))
    show contractM (env.size axA) axA axB (getValM vals x) (getValM vals y) =
      contractM (env.size axA) axA axB (getValM vals' x) (getValM vals' y)
    rw [hx, hy]

theorem getValM_append_left (l r : List MTensor) (a : ℕ) (h : a < l.length) :
    getValM (l ++ r) a = getValM l a := by
  unfold getValM
  rw [getElem?_append_of_lt l r a h]

theorem getValM_append_singleton (l r : List MTensor) (e : MTensor) :
    getValM ((l ++ [e]) ++ r) l.length = e := by
  have h : l.length < (l ++ [e]).length := by
    rw [List.length_append, List.length_singleton]
    exact Nat.lt_succ_self l.length
  rw [getValM_append_left _ _ _ h]
  unfold getValM
  rw [getElem?_concat_self l e] <;> rfl

/-- Evaluating more nodes only appends values (masked semantics). -/
theorem foldl_evalStepM_prefix (env : Env) (L : List Node) (acc : List MTensor) :
    ∃ rest, L.foldl (evalStepM env) acc = acc ++ rest := by
  induction L generalizing acc with
  | nil => exact ⟨[], (List.append_nil acc).symm⟩
  | cons m L ih =>
    obtain ⟨rest, h⟩ := ih (evalStepM env acc m)
    exact ⟨[evalOpM env acc m.op] ++ rest, by rw [List.foldl_cons, h, evalStepM, List.append_assoc]⟩

/-- The masked twin of `foldl_evalStep_get`. -/
theorem foldl_evalStepM_get (env : Env) (L : List Node) :
    ∀ (acc : List MTensor) (j : ℕ) (n : Node), L[j]? = some n →
      (∀ a ∈ n.op.args, a < acc.length + j) →
      getValM (L.foldl (evalStepM env) acc) (acc.length + j) =
        evalOpM env (L.foldl (evalStepM env) acc) n.op := by
  induction L with
  | nil =>
    intro acc j n hj _
    first
      | (rw [List.getElem?_nil] at hj; exact Option.noConfusion hj)
      | simp at hj
  | cons m L ih =>
    intro acc j n hj hargs
    rw [List.foldl_cons]
    cases j with
    | zero =>
      have hmn : m = n := by
        first
          | (rw [List.getElem?_cons_zero] at hj; exact Option.some.inj hj)
          | exact Option.some.inj hj
          | simpa using hj
      subst n
      have hlt : ∀ a ∈ m.op.args, a < acc.length := by
        intro a ha
        have h0 : a < acc.length + 0 := hargs a ha
        rw [Nat.add_zero] at h0
        exact h0
      obtain ⟨rest, hrest⟩ := foldl_evalStepM_prefix env L (evalStepM env acc m)
      rw [hrest]
      show getValM ((acc ++ [evalOpM env acc m.op]) ++ rest) acc.length =
        evalOpM env ((acc ++ [evalOpM env acc m.op]) ++ rest) m.op
      rw [getValM_append_singleton acc rest (evalOpM env acc m.op)]
      apply evalOpM_congr
      intro a ha
      rw [List.append_assoc, getValM_append_left acc _ a (hlt a ha)]
    | succ j =>
      have hj' : L[j]? = some n := by
        first
          | (rw [List.getElem?_cons_succ] at hj; exact hj)
          | exact hj
          | simpa using hj
      have hidx : (evalStepM env acc m).length + j = acc.length + (j + 1) := by
        show (acc ++ [evalOpM env acc m.op]).length + j = acc.length + (j + 1)
        rw [List.length_append, List.length_singleton, Nat.add_assoc, Nat.add_comm 1 j]
      have key := ih (evalStepM env acc m) j n hj' (by
        intro a ha
        rw [hidx]
        exact hargs a ha)
      rw [hidx] at key
      exact key

/-- In an acyclic graph, `Graph.evalNodesM` agrees with every node. -/
theorem evalNodesM_consistent (g : Graph) (env : Env) (hg : g.Acyclic) :
    ConsistentM env g.nodes (g.evalNodesM env) := by
  intro i n hn
  have key := foldl_evalStepM_get env g.nodes [] i n hn (by
    intro a ha
    rw [List.length_nil, Nat.zero_add]
    exact hg i n hn a ha)
  rw [List.length_nil, Nat.zero_add] at key
  exact key

/-- The value of node `i` is its op on the values of the graph. -/
theorem getValM_node (g : Graph) (env : Env) (hg : g.Acyclic) (i : ℕ) (n : Node)
    (hn : g.nodes[i]? = some n) :
    getValM (g.evalNodesM env) i = evalOpM env (g.evalNodesM env) n.op :=
  evalNodesM_consistent g env hg i n hn

/-- A `const "-inf"` node is masked everywhere. -/
theorem node_const_neginf (g : Graph) (env : Env) (hg : g.Acyclic) (i : ℕ) (n : Node)
    (hn : g.nodes[i]? = some n) (hop : n.op = .const "-inf") (ι : Idx) :
    getValM (g.evalNodesM env) i ι = .masked := by
  rw [getValM_node g env hg i n hn, hop]
  exact constM_neginf env

/-- A `select c x y` node is `y` where the condition `c` is 0 (the mask drops the key). -/
theorem node_select_drop (g : Graph) (env : Env) (hg : g.Acyclic) (i c x y : ℕ) (n : Node)
    (hn : g.nodes[i]? = some n) (hop : n.op = .select c x y) (ι : Idx)
    (hc : getValM (g.evalNodesM env) c ι = .val 0) :
    getValM (g.evalNodesM env) i ι = getValM (g.evalNodesM env) y ι := by
  rw [getValM_node g env hg i n hn, hop]
  show selectM (getValM (g.evalNodesM env) c ι) (getValM (g.evalNodesM env) x ι)
      (getValM (g.evalNodesM env) y ι) = getValM (g.evalNodesM env) y ι
  rw [hc]
  exact selectM_drop _ _

/-- A `div x c` node is masked where `x` is masked and `c` is a positive real. -/
theorem node_div_masked (g : Graph) (env : Env) (hg : g.Acyclic) (i x y : ℕ) (n : Node)
    (hn : g.nodes[i]? = some n) (hop : n.op = .binary .div x y) (ι : Idx) (c : ℝ) (hpos : 0 < c)
    (hx : getValM (g.evalNodesM env) x ι = .masked) (hy : getValM (g.evalNodesM env) y ι = .val c) :
    getValM (g.evalNodesM env) i ι = .masked := by
  rw [getValM_node g env hg i n hn, hop]
  show BinOp.evalM .div (getValM (g.evalNodesM env) x ι) (getValM (g.evalNodesM env) y ι) = .masked
  rw [hx, hy]
  exact div_masked_left c hpos

/-- **Masked scores.** The scores of masked attention, `s = select(keep, qk, ninf) / scale` with
`ninf` the constant `"-inf"` (CausalAttention.lean, SlidingWindowAttention.lean): where `keep`
is 0 and the scale is a positive real, the score is `masked` in the graph's meaning. -/
theorem masked_score_node (g : Graph) (env : Env) (hg : g.Acyclic)
    (s sel keep qk ninf scale : ℕ) (ns nsel nninf : Node)
    (hs : g.nodes[s]? = some ns) (hsop : ns.op = .binary .div sel scale)
    (hsel : g.nodes[sel]? = some nsel) (hselop : nsel.op = .select keep qk ninf)
    (hninf : g.nodes[ninf]? = some nninf) (hninfop : nninf.op = .const "-inf")
    (ι : Idx) (hkeep : getValM (g.evalNodesM env) keep ι = .val 0)
    (c : ℝ) (hpos : 0 < c) (hscale : getValM (g.evalNodesM env) scale ι = .val c) :
    getValM (g.evalNodesM env) s ι = .masked := by
  have hm : getValM (g.evalNodesM env) sel ι = .masked := by
    rw [node_select_drop g env hg sel keep qk ninf nsel hsel hselop ι hkeep]
    exact node_const_neginf g env hg ninf nninf hninf hninfop ι
  exact node_div_masked g env hg s sel scale ns hs hsop ι c hpos hm hscale

end

end LeanTile
