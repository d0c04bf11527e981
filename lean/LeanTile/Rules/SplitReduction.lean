import LeanTile.Rules.SplitK

/-!
# Rule `split_reduction`

A fused row kernel that streams a long axis on too few CTAs to fill the GPU (a loss reduced to
a scalar: one CTA for the whole batch) is split: the axis's index range `0..n-1` is cut into
slices (consecutive index lists that concatenate to it; a slice past the end is empty), each
CTA folds its slice into float32 partials of the kernel's reductions, starting from the
reduction's identity (0 for a sum, −∞ for a max), and a combine kernel folds the partials in
slice order from the identity again. Deterministic: no atomics.

* `foldl_op_start`: for an associative operation with a two-sided identity `e`, folding from
  any start `c` is `c` combined with the fold from `e`.
* `foldl_flatten`: folding the concatenation of the slices equals folding the slices' folds,
  for any slicing, empty slices included (the generic statement both kinds use).
* `split_reduction_eval` (the theorem the rule cites): a sum over `k < n` equals the slices'
  sums, each folded from 0, added in order from 0.
* `split_reduction_max`: the same for a max, over `WithBot ℝ` (⊥ is the −∞ a kernel starts
  a max from, and the partial of an empty slice).

Online sums (`l = Σ exp(s − m)` with a running max) merge as `split_row`'s states:
`split_row_stats`, Rules/SplitKV.lean.

Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

/-- Folding an associative operation with a two-sided identity `e` from any start `c` is `c`
combined with the fold from `e`. -/
theorem foldl_op_start {α : Type} (op : α → α → α) (e : α)
    (hassoc : ∀ x y z, op (op x y) z = op x (op y z))
    (hl : ∀ x, op e x = x) (hr : ∀ x, op x e = x) :
    ∀ (L : List α) (c : α), L.foldl op c = op c (L.foldl op e) := by
  intro L
  induction L with
  | nil => intro c; simp only [List.foldl_nil, hr]
  | cons x L ih =>
    intro c
    simp only [List.foldl_cons]
    rw [ih (op c x), ih (op e x), hl x, hassoc]

/-- **The split.** Folding the concatenated slices from `e` equals folding, from `e`, the
slices' own folds from `e` (the combine of the partials), for any slices, empty ones included. -/
theorem foldl_flatten {α : Type} (op : α → α → α) (e : α)
    (hassoc : ∀ x y z, op (op x y) z = op x (op y z))
    (hl : ∀ x, op e x = x) (hr : ∀ x, op x e = x) (slices : List (List α)) :
    slices.flatten.foldl op e = (slices.map (fun s => s.foldl op e)).foldl op e := by
  induction slices with
  | nil => simp
  | cons s ss ih =>
    -- simp only beta-reduces the mapped head (rw would leave `(fun s => ..) s`)
    simp only [List.flatten_cons, List.foldl_append, List.map_cons, List.foldl_cons, hl]
    rw [foldl_op_start op e hassoc hl hr ss.flatten (s.foldl op e),
      foldl_op_start op e hassoc hl hr (ss.map (fun s => s.foldl op e)) (s.foldl op e), ih]

/-- **Split reduction (sum).** For any slicing of `0..n-1` into consecutive index lists, the
slices' partial sums (each folded from 0), added in slice order from 0, equal the sum. -/
theorem split_reduction_eval (f : ℕ → ℝ) (n : ℕ) (slices : List (List ℕ))
    (h : slices.flatten = List.range n) :
    ∑ k ∈ Finset.range n, f k =
      (slices.map (fun s => (s.map f).foldl (· + ·) 0)).foldl (· + ·) 0 := by
  rw [sum_split_range f n slices h]
  simp only [foldl_add_eq_sum, zero_add]

/-- **Split reduction (max).** The same for a max over `WithBot ℝ`, every fold started from ⊥
(−∞): the combine of the slices' maxima is the max over the whole range. -/
theorem split_reduction_max (f : ℕ → WithBot ℝ) (n : ℕ) (slices : List (List ℕ))
    (h : slices.flatten = List.range n) :
    ((List.range n).map f).foldl max ⊥ =
      (slices.map (fun s => (s.map f).foldl max ⊥)).foldl max ⊥ := by
  rw [← h, List.map_flatten,
    foldl_flatten (α := WithBot ℝ) max ⊥ max_assoc (fun _ => max_eq_right bot_le)
      (fun _ => max_eq_left bot_le)]
  simp only [List.map_map, Function.comp_def]

end LeanTile
