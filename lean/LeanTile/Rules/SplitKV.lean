import LeanTile.Rules.OnlineSoftmax

/-!
# Rule `split_kv` (flash-decoding)

Attention whose query tiles leave SMs idle (one query: decode) is split over the keys: each
CTA folds the online-softmax state `(m, l, o)` of one slice of the keys (OnlineSoftmax.lean's
`run` from `initState`), and a combine kernel merges the slices' states left to right.
(The kernels store `o / l` and `lse = m + log l` per slice and weigh slice `s` by
`exp(lse_s - max lse)`: the same merge, normalised.)

* `mergeState`: `m = max m₁ m₂`, `l = l₁ e^{m₁ - m} + l₂ e^{m₂ - m}`, `o` likewise.
* `softmax_state_merge`: if `a` represents keys `ks₁` and `b` keys `ks₂` (for their own
  running maxima: `Represents`), `mergeState a b` represents `ks₁ ++ ks₂`.
* `softmax_state_merge_assoc`: the merge is associative (so slices may be merged in any
  grouping: a tree as well as a left fold).
* `represents_ratio`: a state representing `ks` has `o / l = Σ e^s v / Σ e^s` over `ks`.
* `split_kv_eval`: end to end, for ANY split of the key tiles into slices, merging the
  slices' folded states left to right from the empty state gives `o / l = softmax(s) · v`
  over all keys.
* `split_row_stats` (rule `split_row`): a softmax row's statistics alone, split the same way:
  the merged state's `l` is `Σ e^{s - m}` over the whole row for the merged `m`, the divisor
  the normalising kernel uses with that `m` (by `softmax_shift_invariant`, any shift will do).
-/

namespace LeanTile

noncomputable section

variable {D : Type}

/-- The combine of two slices' online-softmax states. -/
def mergeState (a b : SoftmaxState D) : SoftmaxState D where
  m := max a.m b.m
  l := a.l * Real.exp (a.m - max a.m b.m) + b.l * Real.exp (b.m - max a.m b.m)
  o := fun d => a.o d * Real.exp (a.m - max a.m b.m) + b.o d * Real.exp (b.m - max a.m b.m)

/-- Merging two states gives the state of the concatenated keys. -/
theorem softmax_state_merge (a b : SoftmaxState D) (ks₁ ks₂ : List (Key D))
    (ha : Represents a ks₁) (hb : Represents b ks₂) : Represents (mergeState a b) (ks₁ ++ ks₂) := by
  obtain ⟨hal, hao⟩ := ha
  obtain ⟨hbl, hbo⟩ := hb
  refine ⟨?_, fun d => ?_⟩
  · show a.l * Real.exp (a.m - max a.m b.m) + b.l * Real.exp (b.m - max a.m b.m) =
      expSum (max a.m b.m) (ks₁ ++ ks₂)
    rw [expSum_append, hal, hbl, expSum_rescale, expSum_rescale]
  · show a.o d * Real.exp (a.m - max a.m b.m) + b.o d * Real.exp (b.m - max a.m b.m) =
      expW (max a.m b.m) (ks₁ ++ ks₂) d
    rw [expW_append, hao d, hbo d, expW_rescale, expW_rescale]

theorem exp_sub_mul_exp_sub (x y z : ℝ) : Real.exp (x - y) * Real.exp (y - z) = Real.exp (x - z) := by
  rw [← Real.exp_add]
  congr 1
  ring

/-- The merge is associative. -/
theorem softmax_state_merge_assoc (a b c : SoftmaxState D) :
    mergeState (mergeState a b) c = mergeState a (mergeState b c) := by
  have hm : max (max a.m b.m) c.m = max a.m (max b.m c.m) := max_assoc a.m b.m c.m
  simp only [mergeState, hm]
  congr 1
  · simp only [add_mul, mul_assoc, exp_sub_mul_exp_sub, add_assoc]
  · funext d
    simp only [add_mul, mul_assoc, exp_sub_mul_exp_sub, add_assoc]

/-- A state that represents `ks` has `o / l = Σ e^s v / Σ e^s` over `ks`, whatever its `m`. -/
theorem represents_ratio (st : SoftmaxState D) (ks : List (Key D)) (h : Represents st ks) (d : D) :
    st.o d / st.l =
      (ks.map (fun p => Real.exp p.1 * p.2 d)).sum / (ks.map (fun p => Real.exp p.1)).sum := by
  obtain ⟨hl, ho⟩ := h
  have hW : expW 0 ks d = (ks.map (fun p => Real.exp p.1 * p.2 d)).sum := by
    rw [expW_eq_sum]
    simp only [sub_zero]
  have hS : expSum 0 ks = (ks.map (fun p => Real.exp p.1)).sum := by
    rw [expSum_eq_sum]
    simp only [sub_zero]
  rw [ho d, hl, ← expW_rescale 0, ← expSum_rescale 0,
    mul_div_mul_right _ _ (Real.exp_pos _).ne', hW, hS]

/-- Merging the slices' folded states into a state that represents `ks` represents `ks`
followed by every slice's keys. -/
theorem merge_slices_represents (m₀ : ℝ) (slices : List (List (Tile D))) :
    ∀ (st : SoftmaxState D) (ks : List (Key D)), Represents st ks →
      Represents ((slices.map (fun ts => run (initState m₀) ts)).foldl mergeState st)
        (ks ++ (slices.map List.flatten).flatten) := by
  induction slices with
  | nil =>
    intro st ks h
    simp only [List.map_nil, List.foldl_nil, List.flatten_nil, List.append_nil]
    exact h
  | cons ts rest ih =>
    intro st ks h
    have hs : Represents (run (initState m₀) ts) ts.flatten := by
      have h0 := online_softmax_invariant ts (initState m₀) [] (initState_represents m₀)
      rw [List.nil_append] at h0
      exact h0
    have step := ih (mergeState st (run (initState m₀) ts)) (ks ++ ts.flatten)
      (softmax_state_merge st _ ks ts.flatten h hs)
    rw [List.append_assoc] at step
    exact step

/-- **Split-KV, end to end.** For any split of the key tiles into slices (one CTA each),
folding each slice from the empty state and merging the slices left to right gives
`o / l = Σ e^s v / Σ e^s` over all keys: softmax(s) · v. -/
theorem split_kv_eval (m₀ : ℝ) (slices : List (List (Tile D))) (d : D) :
    ((slices.map (fun ts => run (initState m₀) ts)).foldl mergeState (initState m₀)).o d /
        ((slices.map (fun ts => run (initState m₀) ts)).foldl mergeState (initState m₀)).l =
      ((slices.map List.flatten).flatten.map (fun p => Real.exp p.1 * p.2 d)).sum /
        ((slices.map List.flatten).flatten.map (fun p => Real.exp p.1)).sum := by
  have h := merge_slices_represents m₀ slices (initState m₀) [] (initState_represents m₀)
  rw [List.nil_append] at h
  exact represents_ratio _ _ h d

/-- **Split row statistics, end to end.** For any split of a row's tiles into slices, folding
each slice from the empty state and merging the slices left to right gives an `l` equal to
`Σ e^{s - m}` over the whole row, for the merged `m`. -/
theorem split_row_stats (m₀ : ℝ) (slices : List (List (Tile D))) :
    ((slices.map (fun ts => run (initState m₀) ts)).foldl mergeState (initState m₀)).l =
      expSum ((slices.map (fun ts => run (initState m₀) ts)).foldl mergeState (initState m₀)).m
        (slices.map List.flatten).flatten := by
  have h := merge_slices_represents m₀ slices (initState m₀) [] (initState_represents m₀)
  rw [List.nil_append] at h
  obtain ⟨hl, _⟩ := h
  exact hl

end

end LeanTile
