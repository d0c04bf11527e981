import Mathlib

/-!
# Rule `mask_bounds`

A mask that reads run-time data (document ids: `keep i j = (j ≤ i ∧ doc i = doc j)`) bounds no
key by a formula of positions, so `skip_masked_tiles` finds no bound to read off it. The rewrite
adds the bounds, computed from the mask itself: per row, the first and the last kept key
(`first = min {j | keep j}`, `last = max {j | keep j}`, with `n` and `-1`, i.e. nothing, where no
key is kept), and conjoins `first ≤ j ∧ j ≤ last` to `keep`. That changes nothing:

* `first_le_of_keep`, `le_last_of_keep`: a kept key lies between the first and the last kept key.
* `keep_within_bounds`: `keep j ∧ (first ≤ j ∧ j ≤ last) ↔ keep j`, so the select of the scores
  by the new keep is the select by the old one, and every later rule (skip_masked_tiles reading
  the two new comparisons as run-time bounds) rests on the graph as the user wrote it.
* `keep_of_count_eq_span`: a row whose count of kept keys is `last - first + 1` keeps every key
  between them (documents: a run of positions), and `keep_with_interior`: the rewrite as written,
  `static ∧ (keep ∨ count = span) ∧ first ≤ j ∧ j ≤ last ↔ keep j`, where `skip_masked_tiles` runs
  no mask on a block that every row of the tile keeps whole by that reading.

The bounds are over one row's keys (`Fin n`); the graph's rows are independent (the reductions
over the key axis are per row), so the statement for all rows is this one at each row.
-/

namespace LeanTile

/-- The kept keys of a row. -/
def keptKeys {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep] : Finset (Fin n) :=
  Finset.univ.filter keep

/-- The first kept key as a natural number (`n` where none is kept: past every key). -/
def firstKept {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep] : ℕ :=
  if h : (keptKeys keep).Nonempty then ((keptKeys keep).min' h : ℕ) else n

/-- The last kept key as an integer (`-1` where none is kept: before every key). -/
def lastKept {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep] : ℤ :=
  if h : (keptKeys keep).Nonempty then (((keptKeys keep).max' h : ℕ) : ℤ) else -1

theorem mem_keptKeys {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep] (j : Fin n) :
    j ∈ keptKeys keep ↔ keep j := by
  simp [keptKeys]

theorem first_le_of_keep {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep] (j : Fin n)
    (hj : keep j) : firstKept keep ≤ (j : ℕ) := by
  have hm : j ∈ keptKeys keep := (mem_keptKeys keep j).2 hj
  have hne : (keptKeys keep).Nonempty := ⟨j, hm⟩
  unfold firstKept
  rw [dif_pos hne]
  exact Fin.le_iff_val_le_val.1 (Finset.min'_le _ _ hm)

theorem le_last_of_keep {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep] (j : Fin n)
    (hj : keep j) : ((j : ℕ) : ℤ) ≤ lastKept keep := by
  have hm : j ∈ keptKeys keep := (mem_keptKeys keep j).2 hj
  have hne : (keptKeys keep).Nonempty := ⟨j, hm⟩
  unfold lastKept
  rw [dif_pos hne]
  exact_mod_cast Fin.le_iff_val_le_val.1 (Finset.le_max' _ _ hm)

/-- The rewrite's lemma: conjoining the bounds computed from `keep` to `keep` keeps exactly the
keys `keep` keeps. -/
theorem keep_within_bounds {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep] (j : Fin n) :
    (keep j ∧ (firstKept keep ≤ (j : ℕ) ∧ ((j : ℕ) : ℤ) ≤ lastKept keep)) ↔ keep j :=
  ⟨fun h => h.1, fun h => ⟨h, first_le_of_keep keep j h, le_last_of_keep keep j h⟩⟩

/-- A row keeps exactly its span: where the count of its kept keys equals `last - first + 1`,
every key from the first to the last kept one is kept (the kept keys lie in that interval and
are as many as it has). `skip_masked_tiles` leaves such a row's blocks within its bounds
unmasked (`KeyBound.flag`). -/
theorem keep_of_count_eq_span {n : ℕ} (keep : Fin n → Prop) [DecidablePred keep]
    (hc : ((keptKeys keep).card : ℤ) = lastKept keep - (firstKept keep : ℤ) + 1)
    (j : Fin n) (h1 : firstKept keep ≤ (j : ℕ)) (h2 : ((j : ℕ) : ℤ) ≤ lastKept keep) : keep j := by
  by_cases hne : (keptKeys keep).Nonempty
  · -- the first and last kept keys are the least and greatest of the kept keys' Finset
    have hf : firstKept keep = ((keptKeys keep).min' hne : ℕ) := by
      unfold firstKept
      rw [dif_pos hne]
    have hl : lastKept keep = (((keptKeys keep).max' hne : ℕ) : ℤ) := by
      unfold lastKept
      rw [dif_pos hne]
    have hsub : keptKeys keep ⊆ Finset.Icc ((keptKeys keep).min' hne) ((keptKeys keep).max' hne) := by
      intro x hx
      exact Finset.mem_Icc.2 ⟨Finset.min'_le _ _ hx, Finset.le_max' _ _ hx⟩
    have hcount : ((keptKeys keep).card : ℤ)
        = (((keptKeys keep).max' hne : ℕ) : ℤ) - (((keptKeys keep).min' hne : ℕ) : ℤ) + 1 := by
      rw [hc, hf, hl]
    -- as many kept keys as the interval holds: they are all of it
    have hcard : (Finset.Icc ((keptKeys keep).min' hne) ((keptKeys keep).max' hne)).card
        ≤ (keptKeys keep).card := by
      rw [Fin.card_Icc]
      omega
    have heq := Finset.eq_of_subset_of_card_le hsub hcard
    have h1' : ((keptKeys keep).min' hne : ℕ) ≤ (j : ℕ) := by
      rw [← hf]
      exact h1
    have h2' : (j : ℕ) ≤ ((keptKeys keep).max' hne : ℕ) := by
      have h := h2
      rw [hl] at h
      exact_mod_cast h
    have hj : j ∈ Finset.Icc ((keptKeys keep).min' hne) ((keptKeys keep).max' hne) :=
      Finset.mem_Icc.2 ⟨Fin.le_iff_val_le_val.2 h1', Fin.le_iff_val_le_val.2 h2'⟩
    rw [← heq] at hj
    exact (mem_keptKeys keep j).1 hj
  · -- nothing kept: the first kept key is n, past every key, so no j lies within the bounds
    have hf : firstKept keep = n := by
      unfold firstKept
      rw [dif_neg hne]
    have hlt := j.isLt
    exfalso
    omega

/-- The rewrite as `mask_bounds` now writes it: `static * max(keep, exact) * [first ≤ j] *
[j ≤ last]`, `static` the comparisons of positions among keep's factors (so `keep → static`)
and `exact` the row's count equal to its span. It keeps exactly the keys `keep` keeps. -/
theorem keep_with_interior {n : ℕ} (keep static : Fin n → Prop) [DecidablePred keep]
    (hs : ∀ j, keep j → static j) (j : Fin n) :
    (static j ∧ (keep j ∨ ((keptKeys keep).card : ℤ) = lastKept keep - (firstKept keep : ℤ) + 1) ∧
      firstKept keep ≤ (j : ℕ) ∧ ((j : ℕ) : ℤ) ≤ lastKept keep) ↔ keep j := by
  constructor
  · rintro ⟨_, hk | hc, h1, h2⟩
    · exact hk
    · exact keep_of_count_eq_span keep hc j h1 h2
  · intro h
    exact ⟨hs j h, Or.inl h, first_le_of_keep keep j h, le_last_of_keep keep j h⟩

end LeanTile
