import LeanTile.Rules.OnlineSoftmax

/-!
# Rule `skip_masked_tiles`

Attention under a mask writes `select(keep, s, -inf)`: a masked key's score is −∞ in the
kernel, and `exp(−∞ − m) = 0`, so it adds nothing to `l` or `o` and does not raise `m`.
ℝ has no −∞: a masked key is modelled by leaving it out. A streamed tile is a list of keys
with their keep flags (`MKey`); the kernel folds the keys the mask keeps (`kept`).

* `step_nil`: folding a tile that keeps no key leaves the state unchanged.
* `run_skip_masked`: removing from the stream any tiles whose keys are all masked (those
  `skip` picks: the rule picks the key blocks outside the bounds it reads off the mask)
  does not change the final state.
* `run_unmasked_interior`: folding the tiles whose keys are all kept (`inner` picks them:
  every query row of the CTA's tile keeps every key of the block) as plain tiles, without
  evaluating the mask, does not change the final state either (`kept_allKept`).
* `fold_skip_masked`: so `o / l` after the fold that skips the masked tiles and runs the
  interior ones unmasked is the softmax over the kept keys, `Σ_kept exp(s)·v / Σ_kept exp(s)`,
  the graph's masked softmax (every masked term of the graph's sums is `exp(−∞) = 0`).

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

theorem kept_allMasked : ∀ (t : List (MKey D)), allMasked t → kept t = []
  | [], _ => rfl
  | (b, k) :: t, h => by
    have hb : b = false := h (b, k) (by simp)
    subst hb
    show kept t = []
    exact kept_allMasked t (fun q hq => h q (by simp [hq]))

theorem kept_append : ∀ (a b : List (MKey D)), kept (a ++ b) = kept a ++ kept b
  | [], _ => rfl
  | (true, k) :: a, b => by
    show k :: kept (a ++ b) = k :: (kept a ++ kept b)
    rw [kept_append a b]
  | (false, _) :: a, b => by
    show kept (a ++ b) = kept a ++ kept b
    exact kept_append a b

theorem kept_flatten (tiles : List (List (MKey D))) :
    (tiles.map kept).flatten = kept tiles.flatten := by
  induction tiles with
  | nil => rfl
  | cons t ts ih => rw [List.map_cons, List.flatten_cons, List.flatten_cons, ih, kept_append]

/-- A tile with no key leaves the state as it was: `m` stays, `l` and `o` are rescaled by
`exp(m - m) = 1` and gain nothing. -/
theorem step_nil (st : SoftmaxState D) : step st ([] : Tile D) = st := by
  cases st with
  | mk m l o =>
    have hm : tileMax m ([] : Tile D) = m := rfl
    show SoftmaxState.mk (tileMax m ([] : Tile D))
        (l * Real.exp (m - tileMax m ([] : Tile D)) + expSum (tileMax m ([] : Tile D)) ([] : Tile D))
        (fun d => o d * Real.exp (m - tileMax m ([] : Tile D)) + expW (tileMax m ([] : Tile D)) ([] : Tile D) d) =
      SoftmaxState.mk m l o
    rw [hm]
    have hl : l * Real.exp (m - m) + expSum m ([] : Tile D) = l := by
      simp [expSum]
    have ho : (fun d => o d * Real.exp (m - m) + expW m ([] : Tile D) d) = o := by
      funext d
      simp [expW]
    rw [hl, ho]

/-- Skipping the tiles `skip` picks, all of whose keys are masked, leaves the fold's final
state unchanged. -/
theorem run_skip_masked (st : SoftmaxState D) (tiles : List (List (MKey D)))
    (skip : List (MKey D) → Bool) (hskip : ∀ t ∈ tiles, skip t = true → allMasked t) :
    run st (tiles.map kept) = run st ((tiles.filter (fun t => !skip t)).map kept) := by
  induction tiles generalizing st with
  | nil => rfl
  | cons t ts ih =>
    have hts : ∀ u ∈ ts, skip u = true → allMasked u := fun u hu => hskip u (by simp [hu])
    cases hs : skip t with
    | true =>
      have hk : kept t = [] := kept_allMasked t (hskip t (by simp) hs)
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
theorem kept_allKept : ∀ (t : List (MKey D)), allKept t → kept t = t.map Prod.snd
  | [], _ => rfl
  | (b, k) :: t, h => by
    have hb : b = true := h (b, k) (by simp)
    subst hb
    show k :: kept t = k :: t.map Prod.snd
    rw [kept_allKept t (fun q hq => h q (by simp [hq]))]

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
    have hts : ∀ u ∈ ts, inner u = true → allKept u := fun u hu => hin u (by simp [hu])
    have ht : foldTile inner t = kept t := by
      cases hs : inner t with
      | true =>
        rw [kept_allKept t (hin t (by simp) hs)]
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

end

end LeanTile
