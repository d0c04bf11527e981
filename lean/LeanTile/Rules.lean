import LeanTile.Rules.Common
import LeanTile.Rules.FuseElementwise
import LeanTile.Rules.SoftmaxShift
import LeanTile.Rules.OnlineSoftmax
import LeanTile.Rules.ExpToExp2
import LeanTile.Rules.ScalePullout
import LeanTile.Rules.MeanPullout
import LeanTile.Rules.VarianceExpand
import LeanTile.Rules.StreamStats
import LeanTile.Rules.DualGemm
import LeanTile.Rules.TiledAttention
import LeanTile.Rules.FuseReduction
import LeanTile.Rules.GainFold
import LeanTile.Rules.SplitK
import LeanTile.Rules.SplitKV
import LeanTile.Rules.SplitReduction
import LeanTile.Rules.Masked
import LeanTile.Rules.MaskSkip
import LeanTile.Rules.MaskBounds
import LeanTile.Rules.PackRows
import LeanTile.Rules.PoolEpilogue
import LeanTile.Rules.FlattenReduction
import LeanTile.Rules.RowEpilogue
import LeanTile.Rules.FlashBackward

/-!
# LeanTile.Rules — every rewrite lemma, one file per rule

| rule | theorem | file |
|---|---|---|
| fuse_elementwise | `LeanTile.fuse_elementwise_eval` (any region of any acyclic graph, evaluated pointwise, equals its root's value) | Rules/FuseElementwise.lean |
| softmax_shift | `LeanTile.softmax_shift_invariant` | Rules/SoftmaxShift.lean |
| online_softmax | `LeanTile.online_softmax_ratio` (resting on `LeanTile.online_softmax_fold`) | Rules/OnlineSoftmax.lean |
| exp_to_exp2 | `LeanTile.exp_eq_exp2_mul_log2e` | Rules/ExpToExp2.lean |
| scale_pullout | `LeanTile.scale_pullout_right` (and `LeanTile.scale_pullout`, the scale first) | Rules/ScalePullout.lean |
| mean_pullout | `LeanTile.mean_pullout` | Rules/MeanPullout.lean |
| variance_expand | `LeanTile.sum_sq_sub_pivot` | Rules/VarianceExpand.lean |
| stream_stats | `LeanTile.sum_split_range` | Rules/StreamStats.lean |
| dual_gemm | `LeanTile.dual_gemm_shared_lhs` | Rules/DualGemm.lean |
| fuse_reduction | `LeanTile.fuse_reduction_eval` (and `fuse_reduction_eval_max`, `fuse_reduction_shared_pass`, `fuse_reduction_epilogue`) | Rules/FuseReduction.lean |
| split_k | `LeanTile.split_k_eval` (from `LeanTile.sum_split_range`) | Rules/SplitK.lean |
| split_kv | `LeanTile.split_kv_eval` (with `LeanTile.softmax_state_merge`, `LeanTile.softmax_state_merge_assoc`; the kernels' (o / l, lse) form with empty slices: `LeanTile.split_kv_lse_combine`, `LeanTile.combine_empty_slice`, `LeanTile.lse_combine_eq_merge`) | Rules/SplitKV.lean |
| split_row | `LeanTile.split_row_stats` (from `LeanTile.merge_slices_represents`) | Rules/SplitKV.lean |
| split_reduction | `LeanTile.split_reduction_eval` (sums; `LeanTile.split_reduction_max` for maxima over `WithBot ℝ`, both from `LeanTile.foldl_flatten`; online sums merge as `LeanTile.split_row_stats`) | Rules/SplitReduction.lean |
| skip_masked_tiles | `LeanTile.fold_skip_masked` (from `LeanTile.step_nil`, `LeanTile.run_skip_masked`, `LeanTile.run_unmasked_interior`; over the graph's masked semantics: `LeanTile.graph_masked_block_nil`, `LeanTile.fold_skip_masked_graph`) | Rules/MaskSkip.lean |
| mask_bounds | `LeanTile.keep_within_bounds` (from `LeanTile.first_le_of_keep`, `LeanTile.le_last_of_keep`) | Rules/MaskBounds.lean |
| (masked semantics) | `LeanTile.evalM_eq_eval` (no `"-inf"`: the masked semantics is the real one), `LeanTile.masked_score_node` (`select(keep, s, -inf) / scale` is −∞ where keep = 0) | Rules/Masked.lean |
| pack_query_group | `LeanTile.run_packed_rows` | Rules/PackRows.lean |
| fuse_pool_epilogue | `LeanTile.pool_epilogue_eval` (from `LeanTile.sumAlong_local`, `LeanTile.maxAlong_local`; the view's index: `LeanTile.merged_index`) | Rules/PoolEpilogue.lean |
| fuse_row_epilogue | `LeanTile.row_epilogue_eval` (rounds of reductions: `LeanTile.row_agree_map`, from `LeanTile.sumAlong_local`, `LeanTile.maxAlong_local`, `LeanTile.sumAlong_update`, `LeanTile.maxAlong_update`) | Rules/RowEpilogue.lean |
| flash_backward | `LeanTile.flash_backward_blocks` (P from the stored row statistics: `LeanTile.softmax_eq_exp_div_sum`; D folded online: `LeanTile.flash_backward_row_term`, from `LeanTile.online_softmax_ratio`; reverse mode's D = rowsum(dO O): `LeanTile.attention_row_term`) | Rules/FlashBackward.lean |
| flatten_reduction | `LeanTile.sum_fin_prod` (and `LeanTile.sum_fin_prod_comm`, `LeanTile.max_fin_prod`; the view's index: `LeanTile.flat_index`) | Rules/FlattenReduction.lean |
| merge_gemm_axes | `LeanTile.matmul_rows_reindex` (and `LeanTile.matmul_cols_reindex`) | Rules/FlattenReduction.lean |
| gain_fold | `LeanTile.gain_fold` (not cited yet: `LeanTile.bias_fold`, `LeanTile.affine_fold`) | Rules/GainFold.lean |
| end to end | `LeanTile.tiled_attention_eq_softmax` | Rules/TiledAttention.lean |
-/
