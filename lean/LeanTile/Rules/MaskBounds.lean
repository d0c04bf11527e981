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

end LeanTile
