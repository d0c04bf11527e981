import LeanTile.Rules.Common

/-!
# Rule `fuse_pool_epilogue`

The Python rule `fuse_pool_epilogue` (`python/leantile/derive/rules/pool.py`) computes a
reduction over the innermost axis `p` of a GEMM's weight (max or average pooling written as
`y = X W`, `W [k, n, p]`, then a max or a sum over `p`) in the GEMM kernel's epilogue. The
weight is read through its 2-D view `[k, n * P]`; a CTA's column tile holds every position of
`p` for its positions of `n`, and each pooled value is reduced from the tile alone.

* `sumAlong_local`, `maxAlong_local`: a reduction along axis `a` at index `ι` reads the reduced
  tensor only at `ι` with `a` updated: two tensors that agree there (the graph's product and
  the tile the CTA computed) have the same reduction at `ι`.
* `merged_index` : column `n * P + p` of the 2-D view, `p < P`, is position `(n, p)`:
  `(n * P + p) / P = n` and `(n * P + p) % P = p`.
* `pool_epilogue_eval` (the theorem the rule cites): both facts together, for sums and maxima.

Nothing here is checked by a Lean toolchain yet (see docs/lean.md).
-/

namespace LeanTile

noncomputable section

/-- A sum along `a` at `ι` depends only on the tensor along `a` through `ι`. -/
theorem sumAlong_local (n : ℕ) (a : String) (t t' : Tensor) (ι : Idx)
    (h : ∀ k, k < n → t (Function.update ι a k) = t' (Function.update ι a k)) :
    sumAlong n a t ι = sumAlong n a t' ι := by
  show ∑ k ∈ Finset.range n, t (Function.update ι a k) = ∑ k ∈ Finset.range n, t' (Function.update ι a k)
  exact Finset.sum_congr rfl (fun k hk => h k (Finset.mem_range.mp hk))

/-- A left fold whose steps agree on every element of the list gives the same result. -/
theorem foldl_congr_mem (f g : ℝ → ℕ → ℝ) :
    ∀ (l : List ℕ) (x : ℝ), (∀ m k, k ∈ l → f m k = g m k) → l.foldl f x = l.foldl g x
  | [], _, _ => rfl
  | k :: l, x, h => by
    rw [List.foldl_cons, List.foldl_cons, h x k (by simp)]
    exact foldl_congr_mem f g l (g x k) (fun m j hj => h m j (by simp [hj]))

/-- A max along `a` (of `n ≥ 1` positions) at `ι` depends only on the tensor along `a`
through `ι`. -/
theorem maxAlong_local (n : ℕ) (hn : 0 < n) (a : String) (t t' : Tensor) (ι : Idx)
    (h : ∀ k, k < n → t (Function.update ι a k) = t' (Function.update ι a k)) :
    maxAlong n a t ι = maxAlong n a t' ι := by
  -- `show` states the unfolded, beta-reduced goal (defeq), so that `rw` sees the seed's term
  show (List.range n).foldl (fun m k => max m (t (Function.update ι a k))) (t (Function.update ι a 0)) =
    (List.range n).foldl (fun m k => max m (t' (Function.update ι a k))) (t' (Function.update ι a 0))
  rw [h 0 hn]
  exact foldl_congr_mem _ _ (List.range n) _
    (fun m k hk => by simp only [h k (List.mem_range.mp hk)])

/-- Column `n * P + p` of the `[k, n * P]` view is position `(n, p)` of `[k, n, P]`. -/
theorem merged_index (n p P : ℕ) (hp : p < P) :
    (n * P + p) / P = n ∧ (n * P + p) % P = p := by
  have hP : 0 < P := Nat.lt_of_le_of_lt (Nat.zero_le p) hp
  constructor
  · rw [Nat.add_comm, Nat.add_mul_div_right p n hP, Nat.div_eq_of_lt hp, Nat.zero_add]
  · rw [Nat.add_comm, Nat.add_mul_mod_self_right, Nat.mod_eq_of_lt hp]

/-- `fuse_pool_epilogue`: the tile `t'` a CTA computes agrees with the graph's product `t` at
every position of `p` for its output position `ι` (the view's columns `n * P + j`, `j < P`,
are those positions: `merged_index`), so its pooled sum and max at `ι` are the graph's. -/
theorem pool_epilogue_eval (P : ℕ) (hP : 0 < P) (p : String) (t t' : Tensor) (ι : Idx)
    (h : ∀ j, j < P → t (Function.update ι p j) = t' (Function.update ι p j)) :
    sumAlong P p t ι = sumAlong P p t' ι ∧ maxAlong P p t ι = maxAlong P p t' ι :=
  ⟨sumAlong_local P p t t' ι h, maxAlong_local P hP p t t' ι h⟩

end

end LeanTile
