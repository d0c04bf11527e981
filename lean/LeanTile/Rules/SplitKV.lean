import LeanTile.Rules.OnlineSoftmax

/-!
# Rule `split_kv` (flash-decoding)

Attention whose query tiles leave SMs idle (one query: decode) is split over the keys: each
CTA folds the online-softmax state `(m, l, o)` of one slice of the keys (OnlineSoftmax.lean's
`run` from `initState`). The sliced kernel stores `o / l` and `lse = m + log l` per slice (a
slice with no key, past the end of the keys, has `l = 0`: it stores `0` and `lse = log 0 = −∞`),
and the combine kernel (derive/split_kernels.py) weighs slice `s` by `w_s = exp(lse_s − max lse)`
and writes `Σ_s w_s (o / l)_s / Σ_s w_s`.

The merge of raw states:

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

The form the kernels compute, `(o / l, lse)` (`SliceOut`, `summarize`), with `lse` a value of
the masked semantics (`MVal`: an empty slice's lse is `masked`, −∞):

* `slice_weight`: a slice representing keys `ks` has weight `exp(lse − M) = Σ_ks e^{s − M}`
  and weighted output `exp(lse − M) · (o / l) = Σ_ks e^{s − M} v`, for ANY reference `M`; an
  empty slice has weight `exp(−∞ − M) = 0`.
* `split_kv_lse_eval`: for any split into slices and any `M`, `Σ_s w_s out_s / Σ_s w_s` with
  `w_s = exp(lse_s − M)` is `Σ e^s v / Σ e^s` over all keys; `split_kv_lse_combine`: so is
  `combine`, the kernel's form with `M = max_s lse_s` (`lseMax`, the max in the masked
  semantics).
* `combine_empty_slice`, `split_kv_lse_empty_slice`: a slice with lse −∞ (no key) changes
  neither `max lse` nor the sums: removing or inserting one leaves the result as it is.
* `lse_combine_eq_merge`, `combine_pair_eq_mergeState`: the `(o / l, lse)` combine equals
  `o / l` of the `(m, l, o)` merge (`mergeState`); `merge_lse`: the merged state's
  `m + log l` is `M + log Σ_s exp(lse_s − M)`, the log-sum-exp of the slices' lse.
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

theorem mergeState_m (a b : SoftmaxState D) : (mergeState a b).m = max a.m b.m := rfl

theorem mergeState_l (a b : SoftmaxState D) :
    (mergeState a b).l = a.l * Real.exp (a.m - max a.m b.m) + b.l * Real.exp (b.m - max a.m b.m) :=
  rfl

theorem mergeState_o (a b : SoftmaxState D) (d : D) :
    (mergeState a b).o d =
      a.o d * Real.exp (a.m - max a.m b.m) + b.o d * Real.exp (b.m - max a.m b.m) := rfl

/-- Rescaling a merged pair from `q` to `s` is rescaling each term from its own max to `s`. -/
theorem rescale_pair (x y p r q s : ℝ) :
    (x * Real.exp (p - q) + y * Real.exp (r - q)) * Real.exp (q - s) =
      x * Real.exp (p - s) + y * Real.exp (r - s) := by
  rw [add_mul, mul_assoc, mul_assoc, exp_sub_mul_exp_sub, exp_sub_mul_exp_sub]

/-- The merge is associative: field by field, each side rescales the three states' sums to
`max a.m (max b.m c.m)` (`rescale_pair`, then `max_assoc`). -/
theorem softmax_state_merge_assoc (a b c : SoftmaxState D) :
    mergeState (mergeState a b) c = mergeState a (mergeState b c) := by
  apply SoftmaxState.ext_fields
  · simp only [mergeState_m]
    exact max_assoc a.m b.m c.m
  · simp only [mergeState_l, mergeState_m]
    rw [rescale_pair, rescale_pair, max_assoc, add_assoc]
  · funext d
    simp only [mergeState_o, mergeState_m]
    rw [rescale_pair, rescale_pair, max_assoc, add_assoc]

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

-- The kernels' form: normalised partial outputs and log-sum-exp ---------------------------

/-- What the sliced kernel stores for a slice: its log-sum-exp `lse` (a value of the masked
semantics: `masked`, −∞, for a slice with no key) and its normalised output `out = o / l`. -/
structure SliceOut (D : Type) where
  lse : MVal
  out : D → ℝ

/-- A slice's stored pair from its state: `lse = m + log l`, `out = o / l`; a slice whose `l` is
not positive (no key: `l = 0`) stores `lse = −∞` and `out = 0` (the kernel divides by
`max(l, 1e-30)`, and `log 0 = −∞`). -/
def summarize (st : SoftmaxState D) : SliceOut D :=
  if 0 < st.l then ⟨.val (st.m + Real.log st.l), fun d => st.o d / st.l⟩ else ⟨.masked, fun _ => 0⟩

/-- A slice's weight for the reference point `M`: `exp(lse − M)`, computed in the masked
semantics, so `exp(−∞ − M) = 0` for an empty slice. -/
def lseWeight (M : ℝ) (lse : MVal) : ℝ := (BinOp.evalM .sub lse (.val M)).expM

theorem lseWeight_val (M x : ℝ) : lseWeight M (.val x) = Real.exp (x - M) := rfl

theorem lseWeight_masked (M : ℝ) : lseWeight M .masked = 0 := rfl

/-- `Σ_s w_s · out_s d`. -/
def combineNum (M : ℝ) (ss : List (SliceOut D)) (d : D) : ℝ :=
  (ss.map (fun s => lseWeight M s.lse * s.out d)).sum

/-- `Σ_s w_s`. -/
def combineDen (M : ℝ) (ss : List (SliceOut D)) : ℝ :=
  (ss.map (fun s => lseWeight M s.lse)).sum

/-- The combine for the reference point `M`: `Σ_s w_s out_s / Σ_s w_s`, `w_s = exp(lse_s − M)`. -/
def combineAt (M : ℝ) (ss : List (SliceOut D)) (d : D) : ℝ :=
  combineNum M ss d / combineDen M ss

/-- `max_s lse_s` in the masked semantics (−∞ for no slice; an empty slice's −∞ raises nothing). -/
def lseMax (ss : List (SliceOut D)) : MVal :=
  ss.foldr (fun s acc => BinOp.evalM .max s.lse acc) .masked

/-- The real a masked-semantics value holds (0 when it is not a real). -/
def MVal.realOr0 : MVal → ℝ
  | .val x => x
  | .masked => 0
  | .undef => 0

/-- **The combine kernel**: weights `exp(lse_s − max_s lse_s)`, `Σ_s w_s out_s / Σ_s w_s`. (When
every slice is empty, `max lse = −∞` and the kernel divides `0 / 0`; here the reference is then
0 and every weight is 0.) -/
def combine (ss : List (SliceOut D)) (d : D) : ℝ :=
  combineAt (lseMax ss).realOr0 ss d

theorem combineNum_nil (M : ℝ) (d : D) : combineNum M ([] : List (SliceOut D)) d = 0 := by
  simp only [combineNum, List.map_nil, List.sum_nil]

theorem combineNum_cons (M : ℝ) (s : SliceOut D) (ss : List (SliceOut D)) (d : D) :
    combineNum M (s :: ss) d = lseWeight M s.lse * s.out d + combineNum M ss d := by
  simp only [combineNum, List.map_cons, List.sum_cons]

theorem combineDen_nil (M : ℝ) : combineDen M ([] : List (SliceOut D)) = 0 := by
  simp only [combineDen, List.map_nil, List.sum_nil]

theorem combineDen_cons (M : ℝ) (s : SliceOut D) (ss : List (SliceOut D)) :
    combineDen M (s :: ss) = lseWeight M s.lse + combineDen M ss := by
  simp only [combineDen, List.map_cons, List.sum_cons]

/-- `expW M ks d / expSum M ks` is the softmax ratio over `ks`, for any `M`. -/
theorem ratio_at (M : ℝ) (ks : List (Key D)) (d : D) :
    expW M ks d / expSum M ks =
      (ks.map (fun p => Real.exp p.1 * p.2 d)).sum / (ks.map (fun p => Real.exp p.1)).sum :=
  represents_ratio ⟨M, expSum M ks, fun d' => expW M ks d'⟩ ks ⟨rfl, fun _ => rfl⟩ d

/-- **One slice.** If `st` represents the keys `ks`, its stored pair has weight
`exp(lse − M) = Σ_ks e^{s − M}` and weighted output `exp(lse − M) · out d = Σ_ks e^{s − M} v d`,
for any `M`: with keys, `exp(m + log l − M) = l · e^{m − M}`; without, `l = 0`, `lse = −∞` and
both are 0. -/
theorem slice_weight (M : ℝ) (st : SoftmaxState D) (ks : List (Key D)) (h : Represents st ks) :
    lseWeight M (summarize st).lse = expSum M ks ∧
      ∀ d, lseWeight M (summarize st).lse * (summarize st).out d = expW M ks d := by
  by_cases hpos : 0 < st.l
  · obtain ⟨hl, ho⟩ := h
    have hs : summarize st = ⟨.val (st.m + Real.log st.l), fun d => st.o d / st.l⟩ := by
      unfold summarize
      rw [if_pos hpos]
    have hw : lseWeight M (summarize st).lse = st.l * Real.exp (st.m - M) := by
      rw [hs]
      show Real.exp (st.m + Real.log st.l - M) = st.l * Real.exp (st.m - M)
      rw [show st.m + Real.log st.l - M = Real.log st.l + (st.m - M) by ring, Real.exp_add,
        Real.exp_log hpos]
    refine ⟨?_, fun d => ?_⟩
    · rw [hw, hl, expSum_rescale]
    · rw [hw, hs]
      show st.l * Real.exp (st.m - M) * (st.o d / st.l) = expW M ks d
      rw [← expW_rescale st.m M ks d, ← ho d, div_eq_mul_inv]
      calc st.l * Real.exp (st.m - M) * (st.o d * st.l⁻¹)
          = st.o d * Real.exp (st.m - M) * (st.l * st.l⁻¹) := by ring
        _ = st.o d * Real.exp (st.m - M) := by rw [mul_inv_cancel₀ hpos.ne', mul_one]
  · have hks : ks = [] := represents_nil_of_not_pos st ks h hpos
    subst hks
    have hs : summarize st = ⟨.masked, fun _ => 0⟩ := by
      unfold summarize
      rw [if_neg hpos]
    refine ⟨?_, fun d => ?_⟩
    · exact (congrArg (fun s : SliceOut D => lseWeight M s.lse) hs).trans rfl
    · refine (congrArg (fun s : SliceOut D => lseWeight M s.lse * s.out d) hs).trans ?_
      show (0 : ℝ) * 0 = 0
      exact mul_zero 0

/-- A slice with no key stores `lse = −∞`. -/
theorem summarize_empty (st : SoftmaxState D) (h : Represents st []) : (summarize st).lse = .masked := by
  obtain ⟨hl, _⟩ := h
  have hpos : ¬ 0 < st.l := by
    rw [hl, expSum_nil]
    exact lt_irrefl 0
  unfold summarize
  rw [if_neg hpos] <;> rfl

/-- The slices' weights and weighted outputs add up to the sums over all their keys. -/
theorem combine_slices (M m₀ : ℝ) (slices : List (List (Tile D))) :
    combineDen M (slices.map (fun ts => summarize (run (initState m₀) ts))) =
        expSum M (slices.map List.flatten).flatten ∧
      ∀ d, combineNum M (slices.map (fun ts => summarize (run (initState m₀) ts))) d =
        expW M (slices.map List.flatten).flatten d := by
  induction slices with
  | nil =>
    refine ⟨?_, fun d => ?_⟩
    · simp only [List.map_nil, List.flatten_nil, combineDen_nil, expSum_nil]
    · simp only [List.map_nil, List.flatten_nil, combineNum_nil, expW_nil]
  | cons ts rest ih =>
    obtain ⟨ihd, ihn⟩ := ih
    obtain ⟨hw, hwo⟩ := slice_weight M (run (initState m₀) ts) ts.flatten (run_represents m₀ ts)
    refine ⟨?_, fun d => ?_⟩
    · simp only [List.map_cons, List.flatten_cons, combineDen_cons]
      rw [ihd, hw, expSum_append]
    · simp only [List.map_cons, List.flatten_cons, combineNum_cons]
      rw [ihn d, hwo d, expW_append]

/-- **Split-KV in the kernels' form, any reference.** For any split of the key tiles into slices
and any `M`, the slices' stored `(lse, o / l)` combined with weights `exp(lse_s − M)`, divided by
their sum, give `Σ e^s v / Σ e^s` over all keys: softmax(s) · v. -/
theorem split_kv_lse_eval (m₀ M : ℝ) (slices : List (List (Tile D))) (d : D) :
    combineAt M (slices.map (fun ts => summarize (run (initState m₀) ts))) d =
      ((slices.map List.flatten).flatten.map (fun p => Real.exp p.1 * p.2 d)).sum /
        ((slices.map List.flatten).flatten.map (fun p => Real.exp p.1)).sum := by
  obtain ⟨hd, hn⟩ := combine_slices M m₀ slices
  unfold combineAt
  rw [hn d, hd]
  exact ratio_at M _ d

/-- **Split-KV, the combine kernel** (weights `exp(lse_s − max_s lse_s)`, empty slices at −∞):
softmax(s) · v over all keys, for any split. -/
theorem split_kv_lse_combine (m₀ : ℝ) (slices : List (List (Tile D))) (d : D) :
    combine (slices.map (fun ts => summarize (run (initState m₀) ts))) d =
      ((slices.map List.flatten).flatten.map (fun p => Real.exp p.1 * p.2 d)).sum /
        ((slices.map List.flatten).flatten.map (fun p => Real.exp p.1)).sum :=
  split_kv_lse_eval m₀ (lseMax (slices.map (fun ts => summarize (run (initState m₀) ts)))).realOr0
    slices d

/-- The `(o / l, lse)` combine equals `o / l` of the `(m, l, o)` merge of the same slices. -/
theorem lse_combine_eq_merge (m₀ M : ℝ) (slices : List (List (Tile D))) (d : D) :
    combineAt M (slices.map (fun ts => summarize (run (initState m₀) ts))) d =
      ((slices.map (fun ts => run (initState m₀) ts)).foldl mergeState (initState m₀)).o d /
        ((slices.map (fun ts => run (initState m₀) ts)).foldl mergeState (initState m₀)).l := by
  rw [split_kv_lse_eval, split_kv_eval]

/-- Two slices: the `(o / l, lse)` combine of their stored pairs is `o / l` of `mergeState`. -/
theorem combine_pair_eq_mergeState (M : ℝ) (a b : SoftmaxState D) (ks₁ ks₂ : List (Key D))
    (ha : Represents a ks₁) (hb : Represents b ks₂) (d : D) :
    combineAt M [summarize a, summarize b] d = (mergeState a b).o d / (mergeState a b).l := by
  obtain ⟨hwa, hwoa⟩ := slice_weight M a ks₁ ha
  obtain ⟨hwb, hwob⟩ := slice_weight M b ks₂ hb
  have hn : combineNum M [summarize a, summarize b] d = expW M (ks₁ ++ ks₂) d := by
    rw [combineNum_cons, combineNum_cons, combineNum_nil, add_zero, hwoa d, hwob d, expW_append]
  have hd : combineDen M [summarize a, summarize b] = expSum M (ks₁ ++ ks₂) := by
    rw [combineDen_cons, combineDen_cons, combineDen_nil, add_zero, hwa, hwb, expSum_append]
  unfold combineAt
  rw [hn, hd, ratio_at, represents_ratio _ _ (softmax_state_merge a b ks₁ ks₂ ha hb) d]

/-- The lse of a merge: `m + log l` of `mergeState a b` is `M + log (exp(lse_a − M) + exp(lse_b − M))`
for any `M` (the log-sum-exp of the two slices' lse), when the merge holds a key. -/
theorem merge_lse (M : ℝ) (a b : SoftmaxState D) (ks₁ ks₂ : List (Key D))
    (ha : Represents a ks₁) (hb : Represents b ks₂) (hpos : 0 < (mergeState a b).l) :
    (mergeState a b).m + Real.log (mergeState a b).l =
      M + Real.log (lseWeight M (summarize a).lse + lseWeight M (summarize b).lse) := by
  obtain ⟨hl, _⟩ := softmax_state_merge a b ks₁ ks₂ ha hb
  rw [(slice_weight M a ks₁ ha).1, (slice_weight M b ks₂ hb).1, ← expSum_append,
    ← expSum_rescale (mergeState a b).m M (ks₁ ++ ks₂), ← hl,
    Real.log_mul hpos.ne' (Real.exp_ne_zero _), Real.log_exp]
  ring

/-- `max(−∞, x) = x`: an empty slice leaves `max lse` as it is. -/
theorem lseMax_insert_masked (ss₁ ss₂ : List (SliceOut D)) (e : SliceOut D) (he : e.lse = .masked) :
    lseMax (ss₁ ++ e :: ss₂) = lseMax (ss₁ ++ ss₂) := by
  induction ss₁ with
  | nil =>
    show BinOp.evalM .max e.lse (lseMax ss₂) = lseMax ss₂
    rw [he, max_masked_left]
  | cons s ss₁ ih =>
    show BinOp.evalM .max s.lse (lseMax (ss₁ ++ e :: ss₂)) = BinOp.evalM .max s.lse (lseMax (ss₁ ++ ss₂))
    rw [ih]

theorem combineNum_insert_masked (M : ℝ) (ss₁ ss₂ : List (SliceOut D)) (e : SliceOut D)
    (he : e.lse = .masked) (d : D) :
    combineNum M (ss₁ ++ e :: ss₂) d = combineNum M (ss₁ ++ ss₂) d := by
  simp only [combineNum, List.map_append, List.map_cons, list_sum_append, List.sum_cons, he,
    lseWeight_masked, zero_mul, zero_add]

theorem combineDen_insert_masked (M : ℝ) (ss₁ ss₂ : List (SliceOut D)) (e : SliceOut D)
    (he : e.lse = .masked) :
    combineDen M (ss₁ ++ e :: ss₂) = combineDen M (ss₁ ++ ss₂) := by
  simp only [combineDen, List.map_append, List.map_cons, list_sum_append, List.sum_cons, he,
    lseWeight_masked, zero_add]

/-- **Empty slices.** A slice stored with `lse = −∞` (weight `exp(−∞ − M) = 0`) changes neither
`max lse` nor the weighted sums: the combine is the same with or without it. -/
theorem combine_empty_slice (ss₁ ss₂ : List (SliceOut D)) (e : SliceOut D) (he : e.lse = .masked)
    (d : D) : combine (ss₁ ++ e :: ss₂) d = combine (ss₁ ++ ss₂) d := by
  unfold combine combineAt
  rw [lseMax_insert_masked ss₁ ss₂ e he, combineNum_insert_masked _ ss₁ ss₂ e he d,
    combineDen_insert_masked _ ss₁ ss₂ e he]

/-- A slice with no key (a slice past the end of the keys) can be dropped from the combine. -/
theorem split_kv_lse_empty_slice (m₀ : ℝ) (slices₁ slices₂ : List (List (Tile D)))
    (ts : List (Tile D)) (hts : ts.flatten = []) (d : D) :
    combine ((slices₁ ++ ts :: slices₂).map (fun ts => summarize (run (initState m₀) ts))) d =
      combine ((slices₁ ++ slices₂).map (fun ts => summarize (run (initState m₀) ts))) d := by
  have he : (summarize (run (initState m₀) ts)).lse = .masked := by
    have h := run_represents (D := D) m₀ ts
    rw [hts] at h
    exact summarize_empty _ h
  simp only [List.map_append, List.map_cons]
  exact combine_empty_slice _ _ _ he d

end

end LeanTile
