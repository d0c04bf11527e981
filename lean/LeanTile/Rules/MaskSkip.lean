import LeanTile.Rules.OnlineSoftmax
import LeanTile.Rules.Masked

/-!
# Rule `skip_masked_tiles`

Attention under a mask writes `select(keep, s, -inf)`: a masked key's score is −∞, and
`exp(−∞ − m) = 0`, so it adds nothing to `l` or `o` and does not raise `m`. The graph's meaning
says exactly that: in the masked semantics (`Graph.evalM`, Semantics.lean) the score of a
dropped key is `masked` (`masked_score_node`, Masked.lean) and weighs `MVal.expM masked = 0`.
The kernel folds, per streamed tile, the keys the mask keeps (`kept`): a key is a score with
its keep flag (`MKey`), and a score of the masked semantics becomes one by `toMKey` (a real
score is kept, −∞ is not).

* `step_nil`: folding a tile that keeps no key leaves the state unchanged.
* `run_skip_masked`: removing from the stream any tiles whose keys are all masked (those
  `skip` picks: the rule picks the key blocks outside the bounds it reads off the mask)
  does not change the final state.
* `run_unmasked_interior`: folding the tiles whose keys are all kept (`inner` picks them:
  every query row of the CTA's tile keeps every key of the block) as plain tiles, without
  evaluating the mask, does not change the final state either (`kept_allKept`).
* `fold_skip_masked`: so `o / l` after the fold that skips the masked tiles and runs the
  interior ones unmasked is the softmax over the kept keys, `Σ_kept exp(s)·v / Σ_kept exp(s)`.

Over the graph's evaluation (the scores of node `s` in `Graph.evalNodesM`, row `ι`, key axis
`a`; `graphTile` is the kernel's tile of a block of key positions):

* `graph_masked_block_nil`: a key block whose every score is masked in the graph's meaning
  leaves the online-softmax state unchanged: it contributes nothing to the fold.
* `sum_expM_kept`, `sum_expM_kept_weights`: the kept keys' sums are the sums over ALL keys
  with `exp` replaced by the masked weight `expM` (`exp(−∞) = 0`).
* `fold_skip_masked_graph`: for any split of the key axis into blocks, the kernel's fold
  (all-masked blocks skipped, all-kept blocks unmasked) gives
  `o / l = Σ_j expM(s_j) v_j / Σ_j expM(s_j)` over every key position `j`: the masked softmax
  of the graph's scores, applied to the values.

The −∞ arithmetic of the kernel's first tiles of a row (while `m = −∞`) is the guard of
`plan.running_maxes`; the fold here starts from any real `m₀`, as `online_softmax_fold` does.
-/

namespace LeanTile

noncomputable section

variable {D : Type}

/-- A key with its mask flag: kept (`true`) or masked (`false`). -/
abbrev MKey (D : Type) := Bool × Key D

/-- The keys of a tile that the mask keeps, in order. -/
def kept : List (MKey D) → Tile D
  | [] => []
  | (true, k) :: t => k :: kept t
  | (false, _) :: t => kept t

/-- Every key of the tile is masked. -/
def allMasked (t : List (MKey D)) : Prop := ∀ p ∈ t, p.1 = false

theorem kept_cons_true (k : Key D) (t : List (MKey D)) : kept ((true, k) :: t) = k :: kept t := rfl

theorem kept_cons_false (k : Key D) (t : List (MKey D)) : kept ((false, k) :: t) = kept t := rfl

theorem kept_allMasked : ∀ (t : List (MKey D)), allMasked t → kept t = [] := by
  intro t
  induction t with
  | nil => intro _; rfl
  | cons p t ih =>
    intro h
    obtain ⟨b, k⟩ := p
    have hb : b = false := h (b, k) (List.mem_cons.2 (Or.inl rfl))
    subst hb
    rw [kept_cons_false]
    exact ih (fun q hq => h q (List.mem_cons.2 (Or.inr hq)))

theorem kept_append : ∀ (a b : List (MKey D)), kept (a ++ b) = kept a ++ kept b := by
  intro a b
  induction a with
  | nil => rw [List.nil_append] <;> rfl
  | cons p a ih =>
    obtain ⟨f, k⟩ := p
    cases f with
    | true => rw [List.cons_append, kept_cons_true, kept_cons_true, ih, List.cons_append]
    | false => rw [List.cons_append, kept_cons_false, kept_cons_false, ih]

theorem kept_flatten (tiles : List (List (MKey D))) :
    (tiles.map kept).flatten = kept tiles.flatten := by
  induction tiles with
  | nil => rfl
  | cons t ts ih => rw [List.map_cons, List.flatten_cons, List.flatten_cons, ih, kept_append]

/-- A tile with no key leaves the state as it was: `m` stays, `l` and `o` are rescaled by
`exp(m - m) = 1` and gain nothing. -/
theorem step_nil (st : SoftmaxState D) : step st ([] : Tile D) = st := by
  apply SoftmaxState.ext_fields
  · rw [step_m, tileMax_nil]
  · rw [step_l, tileMax_nil, sub_self, Real.exp_zero, mul_one, expSum_nil, add_zero]
  · funext d
    rw [step_o, tileMax_nil, sub_self, Real.exp_zero, mul_one, expW_nil, add_zero]

/-- Skipping the tiles `skip` picks, all of whose keys are masked, leaves the fold's final
state unchanged. -/
theorem run_skip_masked (st : SoftmaxState D) (tiles : List (List (MKey D)))
    (skip : List (MKey D) → Bool) (hskip : ∀ t ∈ tiles, skip t = true → allMasked t) :
    run st (tiles.map kept) = run st ((tiles.filter (fun t => !skip t)).map kept) := by
  induction tiles generalizing st with
  | nil => rfl
  | cons t ts ih =>
    have hts : ∀ u ∈ ts, skip u = true → allMasked u :=
      fun u hu => hskip u (List.mem_cons.2 (Or.inr hu))
    cases hs : skip t with
    | true =>
      have hk : kept t = [] := kept_allMasked t (hskip t (List.mem_cons.2 (Or.inl rfl)) hs)
      have hf : (t :: ts).filter (fun u => !skip u) = ts.filter (fun u => !skip u) := by
        simp [List.filter_cons, hs]
      rw [hf, List.map_cons, run_cons, hk, step_nil]
      exact ih st hts
    | false =>
      have hf : (t :: ts).filter (fun u => !skip u) = t :: ts.filter (fun u => !skip u) := by
        simp [List.filter_cons, hs]
      rw [hf, List.map_cons, List.map_cons, run_cons, run_cons]
      exact ih (step st (kept t)) hts

/-- Every key of the tile is kept. -/
def allKept (t : List (MKey D)) : Prop := ∀ p ∈ t, p.1 = true

/-- A tile whose keys are all kept holds all its keys, flags dropped: the mask changes no score
of it, so the kernel folds it without evaluating the mask. -/
theorem kept_allKept : ∀ (t : List (MKey D)), allKept t → kept t = t.map Prod.snd := by
  intro t
  induction t with
  | nil => intro _; rfl
  | cons p t ih =>
    intro h
    obtain ⟨b, k⟩ := p
    have hb : b = true := h (b, k) (List.mem_cons.2 (Or.inl rfl))
    subst hb
    show kept ((true, k) :: t) = k :: t.map Prod.snd
    rw [kept_cons_true, ih (fun q hq => h q (List.mem_cons.2 (Or.inr hq)))]

/-- How the kernel folds a tile it runs: a tile `inner` picks (every row keeps every key of
it) as its plain keys, without the mask; any other tile (a boundary tile) through the mask. -/
def foldTile (inner : List (MKey D) → Bool) (t : List (MKey D)) : Tile D :=
  if inner t then t.map Prod.snd else kept t

/-- Folding the tiles `inner` picks, all of whose keys are kept, without the mask leaves the
fold's final state unchanged. -/
theorem run_unmasked_interior (st : SoftmaxState D) (tiles : List (List (MKey D)))
    (inner : List (MKey D) → Bool) (hin : ∀ t ∈ tiles, inner t = true → allKept t) :
    run st (tiles.map kept) = run st (tiles.map (foldTile inner)) := by
  induction tiles generalizing st with
  | nil => rfl
  | cons t ts ih =>
    have hts : ∀ u ∈ ts, inner u = true → allKept u :=
      fun u hu => hin u (List.mem_cons.2 (Or.inr hu))
    have ht : foldTile inner t = kept t := by
      cases hs : inner t with
      | true =>
        rw [kept_allKept t (hin t (List.mem_cons.2 (Or.inl rfl)) hs)]
        simp [foldTile, hs]
      | false => simp [foldTile, hs]
    rw [List.map_cons, List.map_cons, run_cons, run_cons, ht]
    exact ih (step st (kept t)) hts

/-- **Skipping masked tiles, unmasking interior ones.** Folding only the tiles that may keep a
key (`skip` drops tiles whose keys are all masked), the interior ones (`inner`: all keys kept)
without the mask, `o / l` is the softmax over the kept keys of all tiles. -/
theorem fold_skip_masked (m₀ : ℝ) (tiles : List (List (MKey D))) (skip : List (MKey D) → Bool)
    (hskip : ∀ t ∈ tiles, skip t = true → allMasked t) (inner : List (MKey D) → Bool)
    (hin : ∀ t ∈ tiles, inner t = true → allKept t) (d : D) :
    (run (initState m₀) ((tiles.filter (fun t => !skip t)).map (foldTile inner))).o d /
        (run (initState m₀) ((tiles.filter (fun t => !skip t)).map (foldTile inner))).l =
      ((kept tiles.flatten).map (fun p => Real.exp p.1 * p.2 d)).sum /
        ((kept tiles.flatten).map (fun p => Real.exp p.1)).sum := by
  have hin' : ∀ t ∈ tiles.filter (fun t => !skip t), inner t = true → allKept t :=
    fun t ht => hin t (List.mem_filter.1 ht).1
  rw [← run_unmasked_interior (initState m₀) (tiles.filter (fun t => !skip t)) inner hin',
    ← run_skip_masked (initState m₀) tiles skip hskip,
    online_softmax_ratio, kept_flatten]

-- Over the graph's evaluation ------------------------------------------------------------

/-- A score of the masked semantics with its value row, as the kernel folds it: a real score is
a kept key, a masked (−∞) score a dropped one (`undef`, which no masked graph produces, is
dropped as well; its weight `expM` is 0 too). -/
def toMKey : MVal × (D → ℝ) → MKey D
  | (.val x, v) => (true, (x, v))
  | (.masked, v) => (false, (0, v))
  | (.undef, v) => (false, (0, v))

/-- The kept keys' numerator is the numerator over all keys with the masked weight `expM`. -/
theorem sum_expM_kept (d : D) : ∀ ks : List (MVal × (D → ℝ)),
    (ks.map (fun p => p.1.expM * p.2 d)).sum =
      ((kept (ks.map toMKey)).map (fun p => Real.exp p.1 * p.2 d)).sum := by
  intro ks
  induction ks with
  | nil => rfl
  | cons p ks ih =>
    obtain ⟨sc, v⟩ := p
    cases sc with
    | val x =>
      have e : kept (((MVal.val x, v) :: ks).map toMKey) = (x, v) :: kept (ks.map toMKey) := rfl
      rw [e, List.map_cons, List.map_cons, List.sum_cons, List.sum_cons, ih] <;> rfl
    | masked =>
      have e : kept (((MVal.masked, v) :: ks).map toMKey) = kept (ks.map toMKey) := rfl
      rw [e, List.map_cons, List.sum_cons, ih]
      show (0 : ℝ) * v d + _ = _
      rw [zero_mul, zero_add]
    | undef =>
      have e : kept (((MVal.undef, v) :: ks).map toMKey) = kept (ks.map toMKey) := rfl
      rw [e, List.map_cons, List.sum_cons, ih]
      show (0 : ℝ) * v d + _ = _
      rw [zero_mul, zero_add]

/-- The kept keys' denominator is the sum of the masked weights `expM` over all keys. -/
theorem sum_expM_kept_weights : ∀ ks : List (MVal × (D → ℝ)),
    (ks.map (fun p => p.1.expM)).sum = ((kept (ks.map toMKey)).map (fun p => Real.exp p.1)).sum := by
  intro ks
  induction ks with
  | nil => rfl
  | cons p ks ih =>
    obtain ⟨sc, v⟩ := p
    cases sc with
    | val x =>
      have e : kept (((MVal.val x, v) :: ks).map toMKey) = (x, v) :: kept (ks.map toMKey) := rfl
      rw [e, List.map_cons, List.map_cons, List.sum_cons, List.sum_cons, ih] <;> rfl
    | masked =>
      have e : kept (((MVal.masked, v) :: ks).map toMKey) = kept (ks.map toMKey) := rfl
      rw [e, List.map_cons, List.sum_cons, ih]
      show (0 : ℝ) + _ = _
      rw [zero_add]
    | undef =>
      have e : kept (((MVal.undef, v) :: ks).map toMKey) = kept (ks.map toMKey) := rfl
      rw [e, List.map_cons, List.sum_cons, ih]
      show (0 : ℝ) + _ = _
      rw [zero_add]

/-- The score of key position `j` of the row at `ι` (key axis `a`): the value of node `s` (the
scores) in the graph's meaning, the masked semantics. -/
def graphScore (g : Graph) (env : Env) (s : ℕ) (a : String) (ι : Idx) (j : ℕ) : MVal :=
  getValM (g.evalNodesM env) s (Function.update ι a j)

/-- The kernel's tile for a block of key positions: each key's graph score, as a kept or
dropped key, with its value row `V j`. -/
def graphTile (g : Graph) (env : Env) (s : ℕ) (a : String) (ι : Idx) (V : ℕ → D → ℝ)
    (blk : List ℕ) : List (MKey D) :=
  blk.map (fun j => toMKey (graphScore g env s a ι j, V j))

theorem graphTile_allMasked (g : Graph) (env : Env) (s : ℕ) (a : String) (ι : Idx)
    (V : ℕ → D → ℝ) (blk : List ℕ) (h : ∀ j ∈ blk, graphScore g env s a ι j = .masked) :
    allMasked (graphTile g env s a ι V blk) := by
  intro p hp
  obtain ⟨j, hj, rfl⟩ := List.mem_map.1 hp
  show (toMKey (graphScore g env s a ι j, V j)).1 = false
  rw [h j hj] <;> rfl

theorem graphTile_allKept (g : Graph) (env : Env) (s : ℕ) (a : String) (ι : Idx)
    (V : ℕ → D → ℝ) (blk : List ℕ) (h : ∀ j ∈ blk, ∃ x, graphScore g env s a ι j = .val x) :
    allKept (graphTile g env s a ι V blk) := by
  intro p hp
  obtain ⟨j, hj, rfl⟩ := List.mem_map.1 hp
  obtain ⟨x, hx⟩ := h j hj
  show (toMKey (graphScore g env s a ι j, V j)).1 = true
  rw [hx] <;> rfl

/-- **A fully masked key block contributes nothing.** If every score of a block of key
positions is masked in the graph's meaning (−∞), folding the block's tile leaves the
online-softmax state `(m, l, o)` exactly as it was. -/
theorem graph_masked_block_nil (g : Graph) (env : Env) (s : ℕ) (a : String) (ι : Idx)
    (V : ℕ → D → ℝ) (blk : List ℕ) (h : ∀ j ∈ blk, graphScore g env s a ι j = .masked)
    (st : SoftmaxState D) :
    step st (kept (graphTile g env s a ι V blk)) = st := by
  rw [kept_allMasked _ (graphTile_allMasked g env s a ι V blk h), step_nil]

/-- The blocks' tiles, flattened, are the keys of the flattened positions. -/
theorem graphTile_flatten (g : Graph) (env : Env) (s : ℕ) (a : String) (ι : Idx)
    (V : ℕ → D → ℝ) (blocks : List (List ℕ)) :
    (blocks.map (graphTile g env s a ι V)).flatten =
      blocks.flatten.map (fun j => toMKey (graphScore g env s a ι j, V j)) :=
  flatten_map_map (fun j => toMKey (graphScore g env s a ι j, V j)) blocks

/-- **Skipping masked tiles, over the graph's evaluation.** Split the key axis `a` into blocks
(any list of blocks concatenating to `0, …, n − 1`). Let `skip` pick blocks whose scores are all
masked in the graph's meaning and `inner` blocks whose scores are all real. The kernel's fold
over the other blocks, the `inner` ones without the mask, gives
`o / l = Σ_j expM(s_j) · V j / Σ_j expM(s_j)` over ALL key positions `j < n`: the softmax of the
graph's masked scores (a masked score weighs `exp(−∞) = 0`) applied to the values. -/
theorem fold_skip_masked_graph (g : Graph) (env : Env) (s : ℕ) (a : String) (ι : Idx)
    (V : ℕ → D → ℝ) (m₀ : ℝ) (blocks : List (List ℕ))
    (hsplit : blocks.flatten = List.range (env.size a))
    (skip : List (MKey D) → Bool)
    (hskip : ∀ b ∈ blocks, skip (graphTile g env s a ι V b) = true →
      ∀ j ∈ b, graphScore g env s a ι j = .masked)
    (inner : List (MKey D) → Bool)
    (hin : ∀ b ∈ blocks, inner (graphTile g env s a ι V b) = true →
      ∀ j ∈ b, ∃ x, graphScore g env s a ι j = .val x)
    (d : D) :
    (run (initState m₀) (((blocks.map (graphTile g env s a ι V)).filter (fun t => !skip t)).map
        (foldTile inner))).o d /
      (run (initState m₀) (((blocks.map (graphTile g env s a ι V)).filter (fun t => !skip t)).map
        (foldTile inner))).l =
      (∑ j ∈ Finset.range (env.size a), (graphScore g env s a ι j).expM * V j d) /
        ∑ j ∈ Finset.range (env.size a), (graphScore g env s a ι j).expM := by
  have hskip' : ∀ t ∈ blocks.map (graphTile g env s a ι V), skip t = true → allMasked t := by
    intro t ht hs
    obtain ⟨b, hb, rfl⟩ := List.mem_map.1 ht
    exact graphTile_allMasked g env s a ι V b (hskip b hb hs)
  have hin' : ∀ t ∈ blocks.map (graphTile g env s a ι V), inner t = true → allKept t := by
    intro t ht hs
    obtain ⟨b, hb, rfl⟩ := List.mem_map.1 ht
    exact graphTile_allKept g env s a ι V b (hin b hb hs)
  have hflat : (blocks.map (graphTile g env s a ι V)).flatten =
      ((List.range (env.size a)).map (fun j => (graphScore g env s a ι j, V j))).map toMKey := by
    rw [graphTile_flatten, hsplit, List.map_map] <;> rfl
  have hnum : ((kept (((List.range (env.size a)).map (fun j => (graphScore g env s a ι j, V j))).map
        toMKey)).map (fun p => Real.exp p.1 * p.2 d)).sum =
      ∑ j ∈ Finset.range (env.size a), (graphScore g env s a ι j).expM * V j d := by
    rw [← sum_expM_kept d, List.map_map, list_sum_range] <;> rfl
  have hden : ((kept (((List.range (env.size a)).map (fun j => (graphScore g env s a ι j, V j))).map
        toMKey)).map (fun p => Real.exp p.1)).sum =
      ∑ j ∈ Finset.range (env.size a), (graphScore g env s a ι j).expM := by
    rw [← sum_expM_kept_weights, List.map_map, list_sum_range] <;> rfl
  rw [fold_skip_masked m₀ (blocks.map (graphTile g env s a ι V)) skip hskip' inner hin' d, hflat,
    hnum, hden]

end

end LeanTile
