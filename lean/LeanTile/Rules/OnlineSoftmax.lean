import LeanTile.Rules.Common

/-!
# Rule `online_softmax`

Stream the reduced axis in tiles, keeping a running state `(m, l, o)`: the running max
`m`, the running denominator `l = Σ exp(s - m)` and the running numerator
`o = Σ exp(s - m) · v` (one entry per value column `d`). When a tile arrives, the new
max is `m' = max(m, max of the tile)`, and the old `l`, `o` are rescaled by
`exp(m - m')` before the tile's own terms are added.

* `online_softmax_invariant`: if the state represents the keys seen so far (for ITS
  OWN `m`), it still does after folding in ANY list of tiles. The algebra holds for
  any running `m`, so no hypothesis about maxima is needed.
* `online_softmax_fold`: from the empty state (`l = 0`, `o = 0`, any `m₀`; ℝ has no
  −∞), folding any list of tiles gives `l = Σ exp(s - m)`, `o = Σ exp(s - m)·v` over
  all keys of all tiles, with `m` the final running max.
* `online_softmax_max`: that final `m` is the fold of `max` over `m₀` and every score.
* `online_softmax_ratio`: `o / l` does not depend on `m` at all: it is
  `Σ exp(s)·v / Σ exp(s)`, the softmax-weighted sum of the values.
-/

namespace LeanTile

noncomputable section

variable {D : Type}

/-- A key: its score and its value row (indexed by the value column `d : D`). -/
abbrev Key (D : Type) := ℝ × (D → ℝ)

/-- A tile: a list of keys. -/
abbrev Tile (D : Type) := List (Key D)

/-- The running state of online softmax. -/
structure SoftmaxState (D : Type) where
  m : ℝ
  l : ℝ
  o : D → ℝ

/-- Running max step. -/
def maxScore (a : ℝ) (p : Key D) : ℝ := max a p.1

/-- The max of `m` and the scores of a tile. -/
def tileMax (m : ℝ) (t : Tile D) : ℝ := t.foldl maxScore m

/-- `Σ exp(s - m)` over a list of keys. -/
def expSum (m : ℝ) : List (Key D) → ℝ
  | [] => 0
  | p :: ks => Real.exp (p.1 - m) + expSum m ks

/-- `Σ exp(s - m) · v d` over a list of keys. -/
def expW (m : ℝ) : List (Key D) → D → ℝ
  | [], _ => 0
  | p :: ks, d => Real.exp (p.1 - m) * p.2 d + expW m ks d

/-- Fold one tile into the state, rescaling the old sums by `exp(m - m')`. -/
def step (st : SoftmaxState D) (t : Tile D) : SoftmaxState D where
  m := tileMax st.m t
  l := st.l * Real.exp (st.m - tileMax st.m t) + expSum (tileMax st.m t) t
  o := fun d => st.o d * Real.exp (st.m - tileMax st.m t) + expW (tileMax st.m t) t d

/-- Fold a list of tiles. -/
def run : SoftmaxState D → List (Tile D) → SoftmaxState D
  | st, [] => st
  | st, t :: ts => run (step st t) ts

/-- The empty state: nothing seen yet, any starting max `m₀`. -/
def initState (m₀ : ℝ) : SoftmaxState D where
  m := m₀
  l := 0
  o := fun _ => 0

/-- Two states with the same fields are equal (stated here so that proofs of state equalities
need neither `congr` nor the shape of a generated extensionality lemma). -/
theorem SoftmaxState.ext_fields {a b : SoftmaxState D} (hm : a.m = b.m) (hl : a.l = b.l)
    (ho : a.o = b.o) : a = b := by
  obtain ⟨m₁, l₁, o₁⟩ := a
  obtain ⟨m₂, l₂, o₂⟩ := b
  change m₁ = m₂ at hm
  change l₁ = l₂ at hl
  change o₁ = o₂ at ho
  subst hm
  subst hl
  subst ho
  rfl

theorem tileMax_nil (m : ℝ) : tileMax m ([] : Tile D) = m := rfl

theorem expSum_nil (m : ℝ) : expSum m ([] : List (Key D)) = 0 := rfl

theorem expW_nil (m : ℝ) (d : D) : expW m ([] : List (Key D)) d = 0 := rfl

/-- `exp(x - y) · exp(y - z) = exp(x - z)`. -/
theorem exp_sub_mul_exp_sub (x y z : ℝ) : Real.exp (x - y) * Real.exp (y - z) = Real.exp (x - z) := by
  rw [← Real.exp_add, show x - y + (y - z) = x - z by ring]

theorem step_m (st : SoftmaxState D) (t : Tile D) : (step st t).m = tileMax st.m t := rfl

theorem step_l (st : SoftmaxState D) (t : Tile D) :
    (step st t).l = st.l * Real.exp (st.m - tileMax st.m t) + expSum (tileMax st.m t) t := rfl

theorem step_o (st : SoftmaxState D) (t : Tile D) (d : D) :
    (step st t).o d = st.o d * Real.exp (st.m - tileMax st.m t) + expW (tileMax st.m t) t d :=
  rfl

theorem run_nil (st : SoftmaxState D) : run st [] = st := rfl

theorem run_cons (st : SoftmaxState D) (t : Tile D) (ts : List (Tile D)) :
    run st (t :: ts) = run (step st t) ts := rfl

/-- `run` is a left fold. -/
theorem run_eq_foldl (st : SoftmaxState D) (ts : List (Tile D)) : run st ts = ts.foldl step st := by
  induction ts generalizing st with
  | nil => rfl
  | cons t ts ih => exact ih (step st t)

theorem expSum_append (m : ℝ) (a b : List (Key D)) :
    expSum m (a ++ b) = expSum m a + expSum m b := by
  induction a with
  | nil => simp only [List.nil_append, expSum, zero_add]
  | cons p a ih => simp only [List.cons_append, expSum, ih, add_assoc]

theorem expW_append (m : ℝ) (a b : List (Key D)) (d : D) :
    expW m (a ++ b) d = expW m a d + expW m b d := by
  induction a with
  | nil => simp only [List.nil_append, expW, zero_add]
  | cons p a ih => simp only [List.cons_append, expW, ih, add_assoc]

/-- Rescaling: `Σ exp(s - m) · exp(m - m') = Σ exp(s - m')`. -/
theorem expSum_rescale (m m' : ℝ) (ks : List (Key D)) :
    expSum m ks * Real.exp (m - m') = expSum m' ks := by
  induction ks with
  | nil => simp only [expSum, zero_mul]
  | cons p ks ih =>
    have e : Real.exp (p.1 - m) * Real.exp (m - m') = Real.exp (p.1 - m') :=
      exp_sub_mul_exp_sub p.1 m m'
    simp only [expSum]
    rw [add_mul, ih, e]

theorem expW_rescale (m m' : ℝ) (ks : List (Key D)) (d : D) :
    expW m ks d * Real.exp (m - m') = expW m' ks d := by
  induction ks with
  | nil => simp only [expW, zero_mul]
  | cons p ks ih =>
    have e : Real.exp (p.1 - m) * p.2 d * Real.exp (m - m') = Real.exp (p.1 - m') * p.2 d := by
      have h : Real.exp (p.1 - m') = Real.exp (p.1 - m) * Real.exp (m - m') :=
        (exp_sub_mul_exp_sub p.1 m m').symm
      rw [h]
      ring
    simp only [expW]
    rw [add_mul, ih, e]

/-- The state represents the key list `ks` (for its own running max). -/
abbrev Represents (st : SoftmaxState D) (ks : List (Key D)) : Prop :=
  st.l = expSum st.m ks ∧ ∀ d, st.o d = expW st.m ks d

/-- One tile keeps the invariant. -/
theorem step_represents (st : SoftmaxState D) (ks : List (Key D)) (t : Tile D)
    (h : Represents st ks) : Represents (step st t) (ks ++ t) := by
  obtain ⟨hl, ho⟩ := h
  constructor
  · rw [step_l, step_m, hl, expSum_rescale, expSum_append]
  · intro d
    rw [step_o, step_m, ho d, expW_rescale, expW_append]

/-- Any list of tiles keeps the invariant: induction over the tiles, generalizing the
state and the keys seen so far. -/
theorem online_softmax_invariant (tiles : List (Tile D)) :
    ∀ (st : SoftmaxState D) (ks : List (Key D)), Represents st ks →
      Represents (run st tiles) (ks ++ tiles.flatten) := by
  induction tiles with
  | nil =>
    intro st ks h
    rw [run_nil, List.flatten_nil, List.append_nil]
    exact h
  | cons t ts ih =>
    intro st ks h
    rw [run_cons, List.flatten_cons, ← List.append_assoc]
    exact ih (step st t) (ks ++ t) (step_represents st ks t h)

theorem initState_represents (m₀ : ℝ) : Represents (initState (D := D) m₀) [] := by
  constructor
  · rfl
  · intro d
    rfl

/-- A slice folded from the empty state represents its keys. -/
theorem run_represents (m₀ : ℝ) (ts : List (Tile D)) : Represents (run (initState m₀) ts) ts.flatten := by
  have h0 := online_softmax_invariant ts (initState m₀) [] (initState_represents m₀)
  rw [List.nil_append] at h0
  exact h0

theorem expSum_nonneg (m : ℝ) (ks : List (Key D)) : 0 ≤ expSum m ks := by
  induction ks with
  | nil => exact le_of_eq (expSum_nil m).symm
  | cons p ks ih => exact add_nonneg (Real.exp_pos (p.1 - m)).le ih

/-- A key list with a key has a positive `Σ exp(s - m)`. -/
theorem expSum_cons_pos (m : ℝ) (p : Key D) (ks : List (Key D)) : 0 < expSum m (p :: ks) :=
  add_pos_of_pos_of_nonneg (Real.exp_pos (p.1 - m)) (expSum_nonneg m ks)

/-- A state whose `l` is not positive represents no key. -/
theorem represents_nil_of_not_pos (st : SoftmaxState D) (ks : List (Key D)) (h : Represents st ks)
    (hl : ¬ 0 < st.l) : ks = [] := by
  cases ks with
  | nil => rfl
  | cons p ks =>
    obtain ⟨hl', _⟩ := h
    exact hl (by rw [hl']; exact expSum_cons_pos st.m p ks)

theorem expSum_eq_sum (m : ℝ) (ks : List (Key D)) :
    expSum m ks = (ks.map (fun p => Real.exp (p.1 - m))).sum := by
  induction ks with
  | nil => rfl
  | cons p ks ih => simp only [expSum, ih, List.map_cons, List.sum_cons]

theorem expW_eq_sum (m : ℝ) (ks : List (Key D)) (d : D) :
    expW m ks d = (ks.map (fun p => Real.exp (p.1 - m) * p.2 d)).sum := by
  induction ks with
  | nil => rfl
  | cons p ks ih => simp only [expW, ih, List.map_cons, List.sum_cons]

/-- **Online softmax fold.** Folding (m, l, o) over ANY list of tiles, with rescaling,
gives `l = Σ exp(s - m)` and `o = Σ exp(s - m) · v` over all keys of all tiles, where
`m` is the final running max. -/
theorem online_softmax_fold (m₀ : ℝ) (tiles : List (Tile D)) :
    (run (initState m₀) tiles).l =
        (tiles.flatten.map (fun p => Real.exp (p.1 - (run (initState m₀) tiles).m))).sum ∧
      ∀ d, (run (initState m₀) tiles).o d =
        (tiles.flatten.map (fun p => Real.exp (p.1 - (run (initState m₀) tiles).m) * p.2 d)).sum := by
  have h := online_softmax_invariant tiles (initState m₀) [] (initState_represents m₀)
  rw [List.nil_append] at h
  obtain ⟨hl, ho⟩ := h
  refine ⟨?_, fun d => ?_⟩
  · rw [hl, expSum_eq_sum]
  · rw [ho d, expW_eq_sum]

theorem foldl_maxScore_eq (ks : List (Key D)) (a : ℝ) :
    ks.foldl maxScore a = ks.foldl (fun b p => max b p.1) a := rfl

/-- The final running max is the fold of `max` over `m₀` and every score. -/
theorem online_softmax_max (st : SoftmaxState D) (tiles : List (Tile D)) :
    (run st tiles).m = tiles.flatten.foldl maxScore st.m := by
  induction tiles generalizing st with
  | nil => rfl
  | cons t ts ih =>
    rw [run_cons, ih, List.flatten_cons, List.foldl_append, step_m]
    all_goals rfl

/-- The final running max bounds every score (and `m₀`). -/
theorem foldl_maxScore_ge (ks : List (Key D)) (a : ℝ) :
    a ≤ ks.foldl maxScore a ∧ ∀ p ∈ ks, p.1 ≤ ks.foldl maxScore a := by
  induction ks generalizing a with
  | nil =>
    refine ⟨le_refl a, ?_⟩
    intro p hp
    first
      | cases hp
      | simp at hp
  | cons q ks ih =>
    obtain ⟨h1, h2⟩ := ih (maxScore a q)
    refine ⟨le_trans (le_max_left a q.1) h1, ?_⟩
    intro p hp
    rcases List.mem_cons.mp hp with hpq | hpk
    · rw [hpq]
      exact le_trans (le_max_right a q.1) h1
    · exact h2 p hpk

/-- **Online softmax ratio.** `o / l` is the softmax-weighted sum of the values:
`Σ exp(s)·v / Σ exp(s)`, whatever the running max was. -/
theorem online_softmax_ratio (m₀ : ℝ) (tiles : List (Tile D)) (d : D) :
    (run (initState m₀) tiles).o d / (run (initState m₀) tiles).l =
      (tiles.flatten.map (fun p => Real.exp p.1 * p.2 d)).sum /
        (tiles.flatten.map (fun p => Real.exp p.1)).sum := by
  have h := online_softmax_invariant tiles (initState m₀) [] (initState_represents m₀)
  rw [List.nil_append] at h
  obtain ⟨hl, ho⟩ := h
  have hW : expW 0 tiles.flatten d = (tiles.flatten.map (fun p => Real.exp p.1 * p.2 d)).sum := by
    rw [expW_eq_sum]
    simp only [sub_zero]
  have hS : expSum 0 tiles.flatten = (tiles.flatten.map (fun p => Real.exp p.1)).sum := by
    rw [expSum_eq_sum]
    simp only [sub_zero]
  rw [ho d, hl, ← expW_rescale 0, ← expSum_rescale 0,
    mul_div_mul_right _ _ (Real.exp_pos _).ne', hW, hS]

end

end LeanTile
