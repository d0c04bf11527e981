import LeanTile.Rules.Common
import LeanTile.Rules.FuseElementwise

/-!
# Rule `fuse_reduction`

The Python rule `fuse_reduction` (`python/leantile/derive/rules/regions.py`) builds one
kernel per row block for reductions over one axis together with their elementwise prologue
(the reduced tensor is a map of loaded tensors, computed in registers and never written) and
their epilogue (elementwise nodes over the reduction results); reductions of the same rows
over the same axis that do not read one another share the kernel's pass over the axis.

* `sum_map_eval`, `max_map_eval`: a reduction of a mapped tensor is the fused loop that
  applies the map to each loaded element as it goes (definitional).
* `fuse_reduction_eval` (the theorem the rule cites) and `fuse_reduction_eval_max`: in a
  graph, the value of a reduction node equals the fused loop over its axis whose body is ANY
  region cut out of the graph at the reduced node (`Rules/FuseElementwise.lean`): the
  prologue is evaluated at each position of the axis.
* `foldl_pairStep`, `fuse_reduction_shared_pass`, `shared_pass_eval`, `sum_pair`: two
  reductions over the same axis computed in ONE loop with a pair accumulator give the pair
  of the two reductions (any two step functions; for sums, the two `Finset` sums).
* `epilogue_eval`, `fuse_reduction_epilogue`: the epilogue evaluated pointwise is the
  kernel's per-row computation on the reduction results; `Region.evalAt_rsum` and
  `Region.evalAt_rmax` show the loops a kernel tree runs for a reduction it contains.

Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

noncomputable section

-- Loops --------------------------------------------------------------------------------

/-- One step of a summing loop. -/
def sumStep (p : ℕ → ℝ) (acc : ℝ) (k : ℕ) : ℝ := acc + p k

/-- One step of a max loop. -/
def maxStep (p : ℕ → ℝ) (m : ℝ) (k : ℕ) : ℝ := max m (p k)

/-- One step of two loops run as one: both accumulators advance at the same `k`. -/
def pairStep {α β : Type} (F : α → ℕ → α) (G : β → ℕ → β) (acc : α × β) (k : ℕ) : α × β :=
  (F acc.1 k, G acc.2 k)

/-- One loop with a pair accumulator is the pair of the two loops (any step functions: two
sums, a max and a sum, …). -/
theorem foldl_pairStep {α β : Type} (F : α → ℕ → α) (G : β → ℕ → β) (ks : List ℕ) (a : α) (b : β) :
    ks.foldl (pairStep F G) (a, b) = (ks.foldl F a, ks.foldl G b) := by
  induction ks generalizing a b with
  | nil => rfl
  | cons k ks ih => exact ih (F a k) (G b k)

theorem foldl_sumStep (p : ℕ → ℝ) (ks : List ℕ) (a : ℝ) :
    ks.foldl (sumStep p) a = a + (ks.map p).sum := by
  induction ks generalizing a with
  | nil => simp only [List.foldl_nil, List.map_nil, List.sum_nil, add_zero]
  | cons k ks ih =>
    rw [List.foldl_cons, ih, List.map_cons, List.sum_cons, sumStep, add_assoc]

/-- The summing loop over `k < n` from 0 is the `Finset` sum. -/
theorem foldl_sumStep_range (p : ℕ → ℝ) (n : ℕ) :
    (List.range n).foldl (sumStep p) 0 = ∑ k ∈ Finset.range n, p k := by
  rw [foldl_sumStep, zero_add, list_sum_range]

/-- The `Finset` form of a shared pass: a sum of pairs is the pair of the sums. -/
theorem sum_pair (s : Finset ℕ) (p q : ℕ → ℝ) :
    ∑ k ∈ s, (p k, q k) = (∑ k ∈ s, p k, ∑ k ∈ s, q k) := by
  first
    | exact Prod.ext (Prod.fst_sum ..) (Prod.snd_sum ..)
    | (ext <;> simp [Prod.fst_sum, Prod.snd_sum])

-- Tensors: a reduction of a map is the fused loop --------------------------------------

/-- A sum of a mapped tensor is the loop that maps each element as it is loaded. -/
theorem sum_map_eval (f : ℝ → ℝ) (t : Tensor) (n : ℕ) (a : String) (ι : Idx) :
    sumAlong n a (mapT f t) ι = ∑ k ∈ Finset.range n, f (t (Function.update ι a k)) := rfl

/-- A max of a mapped tensor is the max loop that maps each element as it is loaded. -/
theorem max_map_eval (f : ℝ → ℝ) (t : Tensor) (n : ℕ) (a : String) (ι : Idx) :
    maxAlong n a (mapT f t) ι =
      (List.range n).foldl (maxStep (fun k => f (t (Function.update ι a k))))
        (f (t (Function.update ι a 0))) := rfl

/-- Two sums of maps of one tensor along one axis, in one pass: the loop with a pair
accumulator (each element of `t` loaded once, both maps applied to it). -/
theorem shared_pass_eval (f g : ℝ → ℝ) (t : Tensor) (n : ℕ) (a : String) (ι : Idx) :
    (sumAlong n a (mapT f t) ι, sumAlong n a (mapT g t) ι) =
      (List.range n).foldl
        (pairStep (sumStep (fun k => f (t (Function.update ι a k))))
          (sumStep (fun k => g (t (Function.update ι a k))))) (0, 0) := by
  rw [foldl_pairStep, foldl_sumStep_range, foldl_sumStep_range] <;> rfl

/-- The epilogue: an elementwise function of two reductions, at one row, is that function of
the two fused loops' results (what the kernel computes per row after its pass). -/
theorem epilogue_eval (h : ℝ → ℝ → ℝ) (f g : ℝ → ℝ) (t : Tensor) (n : ℕ) (a : String)
    (ι : Idx) :
    zipT h (sumAlong n a (mapT f t)) (sumAlong n a (mapT g t)) ι =
      h (∑ k ∈ Finset.range n, f (t (Function.update ι a k)))
        (∑ k ∈ Finset.range n, g (t (Function.update ι a k))) := rfl

-- Graphs: a reduction node with its prologue region --------------------------------------

/-- The loop a kernel tree runs for a sum it contains. -/
theorem Region.evalAt_rsum (env : Env) (vals : List Tensor) (a : String) (x : Region) (ι : Idx) :
    Region.evalAt env vals (.rsum a x) ι =
      ∑ k ∈ Finset.range (env.size a), Region.evalAt env vals x (Function.update ι a k) := rfl

/-- The loop a kernel tree runs for a max it contains. -/
theorem Region.evalAt_rmax (env : Env) (vals : List Tensor) (a : String) (x : Region) (ι : Idx) :
    Region.evalAt env vals (.rmax a x) ι =
      (List.range (env.size a)).foldl
        (maxStep (fun k => Region.evalAt env vals x (Function.update ι a k)))
        (Region.evalAt env vals x (Function.update ι a 0)) := rfl

/-- **Fused reduction** (cited by rule `fuse_reduction`). In a graph whose nodes read only
earlier nodes, let node `r` be `reduce sum x a`. For ANY prologue region cut out of the graph
at `x` (`inl`: the nodes the kernel computes in registers; the others it loads), the value of
`r` at every row index `ι` is the fused loop over the positions `k` of axis `a` that evaluates
the prologue at `ι[a := k]` and accumulates: the reduced tensor is never materialised. -/
theorem fuse_reduction_eval (g : Graph) (env : Env) (hg : g.Acyclic) (inl : ℕ → Bool)
    (fuel r x : ℕ) (n : Node) (a : String) (hn : g.nodes[r]? = some n)
    (hop : n.op = .reduce .sum x a) (ι : Idx) :
    getVal (g.evalNodes env) r ι =
      ∑ k ∈ Finset.range (env.size a),
        Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel x)
          (Function.update ι a k) := by
  have h1 : getVal (g.evalNodes env) r = evalOp env (g.evalNodes env) n.op :=
    evalNodes_consistent g env hg r n hn
  rw [hop] at h1
  rw [congrFun h1 ι]
  show ∑ k ∈ Finset.range (env.size a), getVal (g.evalNodes env) x (Function.update ι a k) = _
  exact Finset.sum_congr rfl
    (fun k _ => (fuse_elementwise_eval g env hg inl fuel x (Function.update ι a k)).symm)

/-- The max form of `fuse_reduction_eval`: a `reduce max` node is the fused max loop over its
prologue region. -/
theorem fuse_reduction_eval_max (g : Graph) (env : Env) (hg : g.Acyclic) (inl : ℕ → Bool)
    (fuel r x : ℕ) (n : Node) (a : String) (hn : g.nodes[r]? = some n)
    (hop : n.op = .reduce .max x a) (ι : Idx) :
    getVal (g.evalNodes env) r ι =
      (List.range (env.size a)).foldl
        (maxStep (fun k => Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel x)
          (Function.update ι a k)))
        (Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel x)
          (Function.update ι a 0)) := by
  have h1 : getVal (g.evalNodes env) r = evalOp env (g.evalNodes env) n.op :=
    evalNodes_consistent g env hg r n hn
  rw [hop] at h1
  have hT := fuse_elementwise_tensor g env hg inl fuel x
  rw [congrFun h1 ι]
  show maxAlong (env.size a) a (getVal (g.evalNodes env) x) ι = _
  exact (congrArg (fun T => maxAlong (env.size a) a T ι) hT).symm

/-- **Shared pass.** Two `reduce sum` nodes over the same axis `a` (for instance Σx and Σx²
of one row, LayerNorm's statistics), each with its own prologue region: one loop over `k`
with a pair accumulator computes both, at every row index. -/
theorem fuse_reduction_shared_pass (g : Graph) (env : Env) (hg : g.Acyclic) (inl : ℕ → Bool)
    (fuel r₁ r₂ x₁ x₂ : ℕ) (n₁ n₂ : Node) (a : String)
    (h₁ : g.nodes[r₁]? = some n₁) (ho₁ : n₁.op = .reduce .sum x₁ a)
    (h₂ : g.nodes[r₂]? = some n₂) (ho₂ : n₂.op = .reduce .sum x₂ a) (ι : Idx) :
    (getVal (g.evalNodes env) r₁ ι, getVal (g.evalNodes env) r₂ ι) =
      (List.range (env.size a)).foldl
        (pairStep
          (sumStep (fun k => Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel x₁)
            (Function.update ι a k)))
          (sumStep (fun k => Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel x₂)
            (Function.update ι a k))))
        (0, 0) := by
  rw [foldl_pairStep, foldl_sumStep_range, foldl_sumStep_range,
    fuse_reduction_eval g env hg inl fuel r₁ x₁ n₁ a h₁ ho₁ ι,
    fuse_reduction_eval g env hg inl fuel r₂ x₂ n₂ a h₂ ho₂ ι] <;> rfl

/-- **Epilogue.** A kernel tree that contains the reductions themselves (`inl` marks the
epilogue nodes, the reductions and their prologues; the tree then has `rsum` / `rmax`
nodes, whose loops `Region.evalAt_rsum` / `Region.evalAt_rmax` spell out) evaluates, at every
row index, to the value the graph gives the epilogue's root. This is `fuse_elementwise_eval`
with reductions in the region. -/
theorem fuse_reduction_epilogue (g : Graph) (env : Env) (hg : g.Acyclic) (inl : ℕ → Bool)
    (fuel root : ℕ) (ι : Idx) :
    Region.evalAt env (g.evalNodes env) (Region.ofNode g.nodes inl fuel root) ι =
      getVal (g.evalNodes env) root ι :=
  fuse_elementwise_eval g env hg inl fuel root ι

end

end LeanTile
