import LeanTile.Rules.Common

/-!
# Rule `stream_stats`

Row statistics (sums, sums of squares) can be accumulated tile by tile while the
contraction axis is streamed: a sum over `0..n-1` equals the sum of the tile sums, for
ANY list of tiles whose concatenation is `0, 1, …, n-1` (equal or unequal tile sizes).
-/

namespace LeanTile

/-- `Σ_{k<n} f k = Σ_tiles Σ_{k ∈ tile} f k` whenever the tiles concatenate to `0..n-1`. -/
theorem sum_split_range (f : ℕ → ℝ) (n : ℕ) (tiles : List (List ℕ))
    (h : tiles.flatten = List.range n) :
    ∑ k ∈ Finset.range n, f k = (tiles.map (fun t => (t.map f).sum)).sum := by
  rw [← list_sum_range, ← h, sum_flatten_map]

/-- The streamed accumulator: start from 0 and add each tile's sum. -/
theorem sum_split_range_foldl (f : ℕ → ℝ) (n : ℕ) (tiles : List (List ℕ))
    (h : tiles.flatten = List.range n) :
    ∑ k ∈ Finset.range n, f k = tiles.foldl (fun acc t => acc + (t.map f).sum) 0 := by
  rw [sum_split_range f n tiles h]
  suffices key : ∀ (a : ℝ) (L : List (List ℕ)),
      L.foldl (fun acc t => acc + (t.map f).sum) a = a + (L.map (fun t => (t.map f).sum)).sum by
    rw [key 0 tiles, zero_add]
  intro a L
  induction L generalizing a with
  | nil => simp only [List.foldl_nil, List.map_nil, List.sum_nil, add_zero]
  | cons t L ih => simp only [List.foldl_cons, List.map_cons, List.sum_cons, ih, add_assoc]

end LeanTile
