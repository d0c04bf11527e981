/-!
# LeanTile.Derivation — derivation steps as plain data

A derivation is an ordered list of steps `{rule, theorem, at, params}` (schema
"leantile/v1"). Replaying it on the graph yields the Plan (Python: `leantile.derive`).

The steps of each built-in are the default derivation of the Python rule engine
(`leantile.derive.engine`), written out here so that `lake exe leantile-export` writes
the same bytes as `leantile export`; a test fails when the two lists drift. A step:

    { rule := "online_softmax", thm := "LeanTile.online_softmax_ratio",
      sites := [4, 5, 6, 7, 8], params := [("axis", .str "t_kv")] }

Field names: `theorem` and `at` are Lean keywords, so the structure calls them `thm`
and `sites`; the exporter writes them as `"theorem"` and `"at"`.
-/

namespace LeanTile

/-- A parameter value: Python allows strings and ints. -/
inductive ParamValue where
  | str (s : String)
  | nat (n : Nat)
  deriving Repr, BEq, Inhabited

/-- One derivation step: `rule` fired at nodes `sites`, justified by Lean theorem `thm`. -/
structure Step where
  rule : String
  thm : String
  sites : List Nat := []
  params : List (String × ParamValue) := []
  deriving Repr, Inhabited

/-- The rule table: rule name ↦ the theorem that justifies it. The Python table
(`leantile.derive.rules.THEOREMS`) cites exactly these names. -/
def ruleTheorems : List (String × String) :=
  [ ("fuse_elementwise", "LeanTile.fuse_elementwise_eval")
  , ("softmax_shift", "LeanTile.softmax_shift_invariant")
  , ("online_softmax", "LeanTile.online_softmax_ratio")
  , ("exp_to_exp2", "LeanTile.exp_eq_exp2_mul_log2e")
  , ("scale_pullout", "LeanTile.scale_pullout_right")
  , ("mean_pullout", "LeanTile.mean_pullout")
  , ("variance_expand", "LeanTile.sum_sq_sub_pivot")
  , ("stream_stats", "LeanTile.sum_split_range")
  , ("dual_gemm", "LeanTile.dual_gemm_shared_lhs")
  , ("fuse_reduction", "LeanTile.fuse_reduction_eval")
  , ("online_sum", "LeanTile.online_softmax_fold")
  , ("split_k", "LeanTile.split_k_eval")
  , ("split_kv", "LeanTile.split_kv_eval")
  , ("split_row", "LeanTile.split_row_stats")
  , ("split_reduction", "LeanTile.split_reduction_eval")
  , ("skip_masked_tiles", "LeanTile.fold_skip_masked")
  , ("pack_query_group", "LeanTile.run_packed_rows")
  , ("fuse_pool_epilogue", "LeanTile.pool_epilogue_eval")
  , ("gain_fold", "LeanTile.gain_fold")
  , ("flatten_reduction", "LeanTile.sum_fin_prod")
  , ("fuse_row_epilogue", "LeanTile.row_epilogue_eval")
  , ("flash_backward", "LeanTile.flash_backward_blocks")
  , ("merge_gemm_axes", "LeanTile.matmul_rows_reindex")
  , ("mask_bounds", "LeanTile.keep_with_interior") ]

-- Steps per built-in: the default derivation of the Python engine (tests/lean checks they agree).
-- Regenerate with `python -c "from leantile import lean; ...lean_derivation_def"`.
def attentionDerivation : List Step :=
  [ { rule := "softmax_shift", thm := "LeanTile.softmax_shift_invariant", sites := [4, 5], params := [] }
  , { rule := "online_softmax", thm := "LeanTile.online_softmax_ratio", sites := [3, 4, 5, 6, 7, 8, 9], params := [("axis", .str "t_kv")] }
  , { rule := "exp_to_exp2", thm := "LeanTile.exp_eq_exp2_mul_log2e", sites := [6], params := [] } ]
def swigluDerivation : List Step :=
  [ { rule := "dual_gemm", thm := "LeanTile.dual_gemm_shared_lhs", sites := [3, 5], params := [] }
  , { rule := "fuse_elementwise", thm := "LeanTile.fuse_elementwise_eval", sites := [4, 6], params := [] } ]
def matmulDerivation : List Step := []
def rmsnormDerivation : List Step :=
  [ { rule := "scale_pullout", thm := "LeanTile.scale_pullout_right", sites := [9, 10], params := [] }
  , { rule := "stream_stats", thm := "LeanTile.sum_split_range", sites := [3], params := [("mode", .str "separate")] } ]
def rmsnormMlpDerivation : List Step :=
  [ { rule := "scale_pullout", thm := "LeanTile.scale_pullout_right", sites := [10, 11, 12], params := [] }
  , { rule := "stream_stats", thm := "LeanTile.sum_split_range", sites := [4], params := [("mode", .str "separate")] }
  , { rule := "dual_gemm", thm := "LeanTile.dual_gemm_shared_lhs", sites := [11, 12], params := [] }
  , { rule := "fuse_elementwise", thm := "LeanTile.fuse_elementwise_eval", sites := [13], params := [] } ]
def layernormLinearGeluDerivation : List Step :=
  [ { rule := "scale_pullout", thm := "LeanTile.scale_pullout_right", sites := [14, 15], params := [] }
  , { rule := "mean_pullout", thm := "LeanTile.mean_pullout", sites := [6, 15], params := [("colsum", .str "streamed")] }
  , { rule := "variance_expand", thm := "LeanTile.sum_sq_sub_pivot", sites := [8], params := [] }
  , { rule := "stream_stats", thm := "LeanTile.sum_split_range", sites := [3, 8], params := [("mode", .str "fused")] }
  , { rule := "fuse_elementwise", thm := "LeanTile.fuse_elementwise_eval", sites := [16, 17], params := [] } ]

-- User architectures (lean/LeanTile/Architectures/{Geglu,AttentionScaled,SoftmaxRow}.lean,
-- Python mirrors in examples/architectures/): the same engine's default derivation.
def gegluDerivation : List Step :=
  [ { rule := "dual_gemm", thm := "LeanTile.dual_gemm_shared_lhs", sites := [3, 5], params := [] }
  , { rule := "fuse_elementwise", thm := "LeanTile.fuse_elementwise_eval", sites := [4, 6], params := [] } ]
def attentionScaledDerivation : List Step :=
  [ { rule := "softmax_shift", thm := "LeanTile.softmax_shift_invariant", sites := [7, 8], params := [] }
  , { rule := "online_softmax", thm := "LeanTile.online_softmax_ratio", sites := [3, 6, 7, 8, 9, 10, 11, 12], params := [("axis", .str "t_kv")] }
  , { rule := "exp_to_exp2", thm := "LeanTile.exp_eq_exp2_mul_log2e", sites := [9], params := [] } ]
def softmaxRowDerivation : List Step :=
  [ { rule := "softmax_shift", thm := "LeanTile.softmax_shift_invariant", sites := [1, 2], params := [] }
  , { rule := "online_softmax", thm := "LeanTile.online_softmax_ratio", sites := [1, 2, 3, 4, 5], params := [("axis", .str "cols")] }
  , { rule := "exp_to_exp2", thm := "LeanTile.exp_eq_exp2_mul_log2e", sites := [3], params := [] }
  , { rule := "split_row", thm := "LeanTile.split_row_stats", sites := [1, 4], params := [("splits", .nat 8)] } ]

def causalAttentionDerivation : List Step :=
  [ { rule := "softmax_shift", thm := "LeanTile.softmax_shift_invariant", sites := [16, 17], params := [] }
  , { rule := "online_softmax", thm := "LeanTile.online_softmax_ratio", sites := [3, 4, 5, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21], params := [("axis", .str "t_kv")] }
  , { rule := "skip_masked_tiles", thm := "LeanTile.fold_skip_masked", sites := [10, 12], params := [("bounds", .str "t_kv <= t_q + 0")] }
  , { rule := "exp_to_exp2", thm := "LeanTile.exp_eq_exp2_mul_log2e", sites := [18], params := [] } ]

def slidingWindowAttentionDerivation : List Step :=
  [ { rule := "softmax_shift", thm := "LeanTile.softmax_shift_invariant", sites := [20, 21], params := [] }
  , { rule := "online_softmax", thm := "LeanTile.online_softmax_ratio", sites := [3, 4, 5, 9, 10, 12, 13, 14, 16, 19, 20, 21, 22, 23, 24, 25], params := [("axis", .str "t_kv")] }
  , { rule := "skip_masked_tiles", thm := "LeanTile.fold_skip_masked", sites := [10, 13, 16], params := [("bounds", .str "t_kv <= t_q + 0; t_kv >= t_q - 1023")] }
  , { rule := "exp_to_exp2", thm := "LeanTile.exp_eq_exp2_mul_log2e", sites := [22], params := [] } ]

def gqaAttentionDerivation : List Step :=
  [ { rule := "softmax_shift", thm := "LeanTile.softmax_shift_invariant", sites := [7, 8], params := [] }
  , { rule := "online_softmax", thm := "LeanTile.online_softmax_ratio", sites := [3, 6, 7, 8, 9, 10, 11, 12], params := [("axis", .str "t_kv")] }
  , { rule := "exp_to_exp2", thm := "LeanTile.exp_eq_exp2_mul_log2e", sites := [9], params := [] } ]

/-- The derivation exported with architecture `name` (`[]` for an unknown name). -/
def derivationOf (name : String) : List Step :=
  match name with
  | "attention" => attentionDerivation
  | "swiglu" => swigluDerivation
  | "matmul" => matmulDerivation
  | "rmsnorm" => rmsnormDerivation
  | "rmsnorm_mlp" => rmsnormMlpDerivation
  | "layernorm_linear_gelu" => layernormLinearGeluDerivation
  | "causal_attention" => causalAttentionDerivation
  | "sliding_window_attention" => slidingWindowAttentionDerivation
  | "gqa_attention" => gqaAttentionDerivation
  | "geglu" => gegluDerivation
  | "attention_scaled" => attentionScaledDerivation
  | "softmax_row" => softmaxRowDerivation
  | _ => []

/-- A finer citation for a rule's step: the exact form `claim` that the step relies on in
the graph and the theorem that states that form. The rule table above (and the exported
steps, which must equal Python's byte for byte) keep citing the rule's main theorem; these
entries name the companion theorems that match the graph more closely. -/
structure Citation where
  rule : String
  claim : String
  thm : String
  deriving Repr, Inhabited

/-- Companion theorems: what the cited theorem rests on, or its other orientation.

* `scale_pullout` cites `scale_pullout_right`: RMSNorm/LayerNorm build `mul(x, r)` with the
  row scale SECOND, so the pulled-out sum is `Σ_k (x_k · r) · w_k`; `scale_pullout` states the
  scale-first form `Σ_k (r · x_k) · w_k`.
* `online_softmax` cites `online_softmax_ratio` (the kernel's output o / l is the
  softmax-weighted sum of the values); `online_softmax_fold` gives the final state (l, o).
* `split_kv` cites `split_kv_eval` (the merge of raw (m, l, o) states); the kernels store
  (o / l, lse) and weigh by exp(lse − max lse): `split_kv_lse_combine` states that form, empty
  slices (lse = −∞) included.
* `skip_masked_tiles` cites `fold_skip_masked` (keys with keep flags);
  `fold_skip_masked_graph` states it over the scores of the graph's masked semantics
  (`Graph.evalNodesM`, where `"-inf"` is −∞ and `exp(−∞) = 0`).

Not exported (the JSON layout is shared with Python); `stepCitation` looks an entry up. -/
def stepCitations : List Citation :=
  [ { rule := "scale_pullout", claim := "matmul(mul(r, x), w): sum_k (r * x_k) * w_k = r * sum_k x_k * w_k",
      thm := "LeanTile.scale_pullout" }
  , { rule := "online_softmax", claim := "the final state: l = sum exp(s - m), o = sum exp(s - m) v",
      thm := "LeanTile.online_softmax_fold" }
  , { rule := "split_kv",
      claim := "the kernels' combine: sum_s exp(lse_s - max lse) (o / l)_s / sum_s exp(lse_s - max lse), an empty slice at lse = -inf",
      thm := "LeanTile.split_kv_lse_combine" }
  , { rule := "skip_masked_tiles",
      claim := "over the graph's masked semantics: o / l = sum_j expM(s_j) v_j / sum_j expM(s_j), exp(-inf) = 0",
      thm := "LeanTile.fold_skip_masked_graph" } ]

/-- The companion theorems cited for `rule` (empty when the main theorem is the whole story). -/
def stepCitation (rule : String) : List String :=
  (stepCitations.filter (fun c => c.rule == rule)).map (·.thm)

end LeanTile
