import LeanTile.Rules.StreamStats

/-!
# Rule `split_k`

A contraction `Σ_{k<n} a k · b k` whose output tiles leave SMs idle is split over CTAs: the
index range `0..n-1` is cut into slices (consecutive index lists that concatenate to it; a
slice past the end is empty), each CTA sums its slice into a float32 partial, and a second
kernel adds the partials left to right from 0, in slice order (deterministic: no atomics).

* `foldl_add_eq_sum`: the left-to-right combine from `a` is `a` plus the sum.
* `split_k_eval`: for ANY such slicing, the combine of the slices' partial sums is the
  contraction (from `sum_split_range`, StreamStats.lean). One output entry of `A · B` is
  `a = A i ·`, `b = B · j`.
-/

namespace LeanTile

/-- Adding a list left to right, starting from `a`. -/
theorem foldl_add_eq_sum (L : List ℝ) (a : ℝ) : L.foldl (· + ·) a = a + L.sum := by
  induction L generalizing a with
  | nil => simp only [List.foldl_nil, List.sum_nil, add_zero]
  | cons x L ih => simp only [List.foldl_cons, List.sum_cons, ih, add_assoc]

/-- **Split-K.** The slices' partial sums, added in slice order from 0 (the combine kernel),
equal the whole contraction, for any slicing of the index range. -/
theorem split_k_eval (a b : ℕ → ℝ) (n : ℕ) (slices : List (List ℕ))
    (h : slices.flatten = List.range n) :
    ∑ k ∈ Finset.range n, a k * b k =
      (slices.map (fun s => (s.map (fun k => a k * b k)).sum)).foldl (· + ·) 0 :=
  (sum_split_range (fun k => a k * b k) n slices h).trans (by rw [foldl_add_eq_sum, zero_add])

end LeanTile
