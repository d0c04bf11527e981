import LeanTile.Semantics

/-!
# Rule `fuse_elementwise`

Merging elementwise producers and consumers into one loop nest: applying `f` to every
element and then `g` to every element is applying `g ∘ f` once. Definitional (`rfl`).
-/

namespace LeanTile

/-- Two elementwise maps evaluate as one pointwise map. -/
theorem fuse_elementwise_eval (f g : ℝ → ℝ) (t : Tensor) :
    mapT g (mapT f t) = mapT (g ∘ f) t := rfl

/-- The binary form: a zip of two maps is one fused zip. -/
theorem fuse_elementwise_eval₂ (h : ℝ → ℝ → ℝ) (f g : ℝ → ℝ) (s t : Tensor) :
    zipT h (mapT f s) (mapT g t) = zipT (fun a b => h (f a) (g b)) s t := rfl

/-- Pointwise: the fused value at an index is the composed function at that index. -/
theorem fuse_elementwise_apply (f g : ℝ → ℝ) (t : Tensor) (ι : Idx) :
    mapT g (mapT f t) ι = g (f (t ι)) := rfl

end LeanTile
