import LeanTile.Rules.OnlineSoftmax

/-!
# Rule `pack_query_group`

Grouped-query attention gives the `g` query heads of a group one K and V. Packed, one CTA's
tile holds rows of several heads (for one query, the group's heads; in the packed-rows layout,
heads × query positions) and streams each key block once for all of them. Every row keeps its own online-softmax state `(m, l, o)`; a packed block
gives each row `r` its own tile of keys `blk r` (its own scores against the shared keys, with
the shared values).

* `run_packed_rows`: folding packed blocks over a family of row states leaves every row in
  the state of folding its own tiles on its own (`run`, whose `o / l` is the softmax over the
  row's keys by `online_softmax_ratio`). Packing changes the layout, never a row's value.
-/

namespace LeanTile

noncomputable section

variable {D ρ : Type}

/-- One packed block: each row `r` of the tile takes the same stream step with its own keys. -/
def packedStep (st : ρ → SoftmaxState D) (blk : ρ → Tile D) : ρ → SoftmaxState D :=
  fun r => step (st r) (blk r)

theorem run_packed_rows (init : ρ → SoftmaxState D) (blocks : List (ρ → Tile D)) (r : ρ) :
    (blocks.foldl packedStep init) r = run (init r) (blocks.map (fun blk => blk r)) := by
  induction blocks generalizing init with
  | nil => rfl
  | cons blk rest ih =>
    simp only [List.foldl_cons, List.map_cons, run_cons]
    exact ih (packedStep init blk)

end

end LeanTile
