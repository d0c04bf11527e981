import LeanTile.Semantics

/-!
# Small list/sum facts shared by the rule files

Proved by induction with `simp only` / `rw` on core list lemmas, so that they do not
depend on which `List.sum` lemmas Mathlib tags `simp`.
-/

namespace LeanTile

theorem list_sum_append (a b : List ℝ) : (a ++ b).sum = a.sum + b.sum := by
  induction a with
  | nil => simp only [List.nil_append, List.sum_nil, zero_add]
  | cons x a ih => simp only [List.cons_append, List.sum_cons, ih, add_assoc]

/-- A list sum over `List.range n` is the `Finset.range n` sum. -/
theorem list_sum_range (g : ℕ → ℝ) (n : ℕ) :
    ((List.range n).map g).sum = ∑ j ∈ Finset.range n, g j := by
  induction n with
  | zero => simp
  | succ n ih =>
    first
      | (rw [List.range_succ, List.map_append, list_sum_append, ih, Finset.sum_range_succ] <;>
          simp only [List.map_cons, List.map_nil, List.sum_cons, List.sum_nil, add_zero]) <;> done
      | simp [List.range_succ, list_sum_append, ih, Finset.sum_range_succ]
      -- Branches without `List.range_succ` (issue 13 hardening; unchecked, no toolchain here).
      -- (a) Mathlib's `List.sum_range_succ` (additive form of `List.prod_range_succ`, stated
      --     with `n.succ`; `exact` accepts it up to `n.succ ≡ n + 1`).
      | (rw [Finset.sum_range_succ, ← ih]; exact List.sum_range_succ g n)
      -- (b) No list-range lemma at all: `Finset.range n` is the multiset `↑(List.range n)` by
      --     definition, so the Finset sum is the list sum (`Multiset.coe_range`,
      --     `Multiset.map_coe`, `Multiset.sum_coe`).
      | (show ((List.range (n + 1)).map g).sum = ((Multiset.range (n + 1)).map g).sum
         rw [← Multiset.coe_range, Multiset.map_coe, Multiset.sum_coe])

/-- Summing over a flattened list of tiles is summing the tile sums. -/
theorem sum_flatten_map (f : ℕ → ℝ) (L : List (List ℕ)) :
    (L.flatten.map f).sum = (L.map (fun t => (t.map f).sum)).sum := by
  induction L with
  | nil => rfl
  | cons t L ih =>
    simp only [List.flatten_cons, List.map_append, list_sum_append, ih, List.map_cons,
      List.sum_cons]

/-- Mapping each tile then flattening is flattening then mapping. -/
theorem flatten_map_map {α β : Type} (f : α → β) (L : List (List α)) :
    (L.map (fun t => t.map f)).flatten = L.flatten.map f := by
  induction L with
  | nil => rfl
  | cons t L ih => simp only [List.map_cons, List.flatten_cons, List.map_append, ih]

end LeanTile
