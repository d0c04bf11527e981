"""Default tiles for a plan's shape, where the plain defaults (kernels.DEFAULT_TILES) waste the
GPU. Every rule here was measured on the H100/H200 (132 SMs); the search may still find better
tiles for one workload, these are what a new graph gets out of the box."""
from __future__ import annotations

import math

from .. import ir
from ..plan.passes import PINGPONG_BLOCK_M, PINGPONG_DTYPES, PINGPONG_THREADS, SWAP_DTYPES
from ..plan.verify import DTYPE_BYTES
from . import kernels as K
from .context import Ctx
from .rules.base import padded
from .sites import FlashBackwardSite, FlashSite, SoftmaxSite


def default_tiles(cx: Ctx) -> dict:
    """The plain defaults (kernels.DEFAULT_TILES) for the graph's dtypes. 16- and 32-bit graphs
    keep DEFAULT_TILES, the tiles every rule below was measured against. A graph with 8-byte
    values (f64) takes rows and k steps half as long: each tile of a GEMM kernel (the LHS's
    block_m x block_k, the weight's block_k x block_n, the output's block_m x block_n staged
    for its store) then holds no more bytes than at DEFAULT_TILES in f32, whose plans fit the
    target. At DEFAULT_TILES a plain f64 GEMM's two operand tiles took 256 KiB at 2 stages, over
    the target's 227 KiB: every f64 graph with a GEMM was refused at its defaults. (f64 runs on
    the CUDA cores: these tiles fit, they were not tuned.)"""
    t = K.DEFAULT_TILES
    wide = max((DTYPE_BYTES.get(d, 4) for d in cx.dtypes()), default=4) // 4
    if wide <= 1:
        return t
    return {**t, "block_m": t["block_m"] // wide, "block_k": t["block_k"] // wide}


# Attention's backward (rules.flash_backward): a CTA's 128 query rows (keys in the dK/dV kernel) by
# 64 streamed positions on two warpgroups where such tiles fill a wave, else 64 rows on one.
# H200, the backward alone (benchmarks/flash_backward/variants.py, results/variants-h200-2026-11-29-first.json):
# 16 heads x 2048^2 x 128, 64 x 64 on 128 threads -> 128 x 64 on 256: 0.433 -> 0.322 ms, causal
# 0.561 -> 0.457, with the scale 0.741 -> 0.443; causal 4 heads x 1000^2 x 64 (32 CTAs of 128
# rows) 0.060 -> 0.074; 64 x 128 tiles leave 256 threads no whole-row split of the score tile.
FLASH_BACKWARD_TILES = {"block_m": 64, "block_n": 64, "threads": 128, "stages": 2}
FLASH_BACKWARD_WIDE_TILES = {"block_m": 128, "block_n": 64, "threads": 256, "stages": 2}


def _backward_ctas(cx: Ctx, s, rows: int) -> int:
    """The fewer CTAs of a flash_backward site's query-tile and key-tile kernels at `rows` rows."""
    batch = math.prod(cx.axes[a] for a in cx.node(s.softmax.div).axes if a not in (s.row, s.axis))
    return batch * min(math.ceil(cx.axes[s.row] / rows), math.ceil(cx.axes[s.axis] / rows))


# The default of a plan with a large GEMM (a wave of 128 x 256 tiles), where its kernels fit: the
# tiles the shipped matmul and rmsnorm entries won with. A GEMM 4096^3 with a six-op epilogue ran
# 0.362 ms at DEFAULT_TILES and 0.243 ms at these on an H200 (benchmarks/fusion/fusion_tiles_probe.py).
# (A cost model choosing per shape is the shapes issue's.)
LARGE_GEMM_TILES = {"block_n": 256, "stages": 4}
# The default where every GEMM or attention has at most 64 rows (m, t_q: decode, skinny GEMMs):
# one warpgroup on a 64-row tile (the smallest wgmma), wide and deep for a GEMM, which then
# streams its weight. On an H200 (benchmarks/split_k_waves/results/issue16-split-probe-2026-11-25.md), split-K
# GEMM m=16 4096^2: 0.0205 ms at the defaults, 0.0143 at 64 rows / 128 threads, 0.0110 also with
# 256 columns and 3 stages (0.90x cuBLAS); one-query attention h32 t8192: 0.0475 -> 0.0417 ms.
SMALL_M_TILES = {"block_m": 64, "threads": 128}
SMALL_M_GEMM_TILES = {"block_n": 256, "stages": 3}
# The default where every GEMM has at most SWAP_AB_ROWS rows (decode-time projections): the
# accumulator kept transposed (plan.passes.swap_operands), the weight's 128 columns on the
# wgmma's M side and the 16 token rows on its N side, 4 stages deep. At 64 x 256 tiles the tensor
# cores did 4x-64x the needed work and the kernel needed a split over k to fill the GPU. H100,
# the split-K slice kernel alone (benchmarks/swap_ab/swap_ab_probe.py, benchmarks/swap_ab/results/swap-ab-probe-h100-2026-11-26.json):
# 1 x 4096 x 6144 0.0218 ms (4 slices) -> 0.0188 unsplit, 1 x 4096 x 14336 0.0425 -> 0.0396,
# 16 x 4096 x 14336 0.0422 -> 0.0403, 1 x 8192 x 10240 0.0584 -> 0.0566 (cuBLAS 0.0205, 0.0455,
# 0.0462, 0.0606); 16 x 8192 x 28672 (224 tiles of 128 columns) 0.1563 -> 0.1620.
SWAP_AB_ROWS = 16
SWAP_AB_TILES = {"block_m": 16, "block_n": 128, "stages": 4, "swap_operands": 1}
# The default of a plan with a GEMM split over k (rows > 64): see shape_tiles.
SPLIT_GEMM_TILES = {"stages": 4}
# Attention (flash kernels, no GEMM kernel beside them: `stages` is one for the plan) streams
# K and V one block deep: TileLang's warp-specialised producer already loads the next block
# while the consumers compute. Every attention search on the H200 found 1 stage best
# (tuned_configs: attention 128 x 256, attention_scaled, causal, gqa and sliding-window
# 128 x 128); gqa t=4096 ran 0.512 ms at 1 stage against 0.656 at 2 (exp).
FLASH_TILES = {"stages": 1}
# Unmasked attention with 128-wide heads over at least FLASH_WIDE_KEYS keys: 256 keys per K/V
# tile (half the online-softmax rescales per key). On an H100 (benchmarks/attention_tiles/results/
# attention-tiles-h100-2026-11-25.md), against 128 keys: published h16 t4096 0.2489 -> 0.2272 ms,
# its scaled form 0.2711 -> 0.2360, gqa t4096 0.5001 -> 0.4676, llama3-8b t2048 0.1350 ->
# 0.1261, llama3-70b t2048 0.2675 -> 0.2501; equal at t512 (0.0149 -> 0.0150). Masked
# (causal, sliding-window) attention keeps 128: a wider tile wastes more of each diagonal block
# (causal t2048 0.1018 -> 0.1048, t512 0.0147 -> 0.0198, window t4096 0.1776 -> 0.1900).
# Since kernels with an exp2 are compiled with -ftz=true (plan.passes.flush_subnormals) these
# shapes take FlashAttention-3's schedule below wherever it applies; the wide tiles remain for
# the plain loop (a bias tile, packed heads, f32), without the flag: at 256 keys ptxas spills
# twice as much with it (48 bytes) and the loop ran 0.97x (benchmarks/ftz/results/ftz-probe-attention-h200-2026-11-26.json).
FLASH_WIDE_TILES = {"block_n": 256, "flush_subnormals": 0}
FLASH_WIDE_KEYS = 2048
# Unmasked attention with heads of at most 64 whose 128-row query tiles leave SMs idle (under
# one wave): 64-row tiles on one warpgroup, 256 keys per tile. GPT-2 t512 (12 heads: 48 CTAs of
# 128 rows) 0.0101 -> 0.0082 ms (1.12x cuDNN), bf16 0.0101 -> 0.0082, scaled bf16 0.0106 ->
# 0.0088; at t2048 (192 CTAs) they lose (0.0565 -> 0.0594), and causal gpt2 t1024 loses too.
FLASH_SMALL_GRID_TILES = {"block_m": 64, "block_n": 256, "threads": 128}
# Every other unmasked attention with heads of 16..128 in 16s over more than
# FLASH_OVERLAP_MIN_KEYS keys: FlashAttention-3's schedule (plan.passes.overlap, emit.overlap: a
# TMA producer warpgroup, the loop rotated so the softmax runs while P V does, two consumer
# warpgroups taking turns) at the plain 128 x 128 tiles. On an H200, the emitted kernel against
# the plain loop, both exp2 (benchmarks/fa3_overlap/overlap_compare.py, benchmarks/fa3_overlap/results/overlap-compare-h200-2026-11-26.json):
# GPT-2 h12 t2048 d64 0.0509 -> 0.0462 ms (cuDNN 0.0406), h32 t1000 d128 0.0408 -> 0.0372
# (cuDNN 0.0350); over 512 keys (4 blocks) it loses a little (llama3-8b t512 0.0130 -> 0.0132).
# Against the wide tiles it lost without -ftz=true (published t4096 0.2332 against 0.2447:
# benchmarks/attention_tiles/results/attention-tiles-h200-2026-11-26.json) and wins with it (benchmarks/ftz/ftz_probe.py, H200,
# best of 4 interleaved rounds, benchmarks/ftz/results/ftz-probe-attention-h200-2026-11-26.json): published
# 0.2414 -> 0.2395 ms (cuDNN 0.2372), scaled 0.2413 -> 0.2401, llama3-8b t2048 0.1344 ->
# 0.1309, gqa t4096 0.4782 -> 0.4782. Where the pass finds no FA3 cut (a bias or mask
# tile loaded per block, packed heads, f32) the plan keeps the plain loop at these same tiles.
# Masked attention (causal, sliding-window: the loop runs over the key blocks some row keeps)
# takes it over more than FLASH_OVERLAP_MASKED_MIN_KEYS keys. H200, plain 128 x 128 -> overlapped
# (benchmarks/attention_tiles/results/attention-tiles-masked-h200-2026-11-26.json): causal published t4096 0.1781 -> 0.1680
# ms (cuDNN 0.1626), llama3-8b t2048 0.1018 -> 0.0984, chunk 512 of 4096 0.0721 -> 0.0668,
# sliding window t4096 0.1780 -> 0.1749 and t8192 0.1895 -> 0.1849; at 1024 keys and fewer it
# loses (GPT-2 t1024 bf16 0.0145 -> 0.0149, llama3-8b t512 0.0134 -> 0.0138).
FLASH_OVERLAP_TILES = {"overlap": 1}
FLASH_OVERLAP_MIN_KEYS = 512
FLASH_OVERLAP_MASKED_MIN_KEYS = 1024
# Attention over one query (or a few: decode, split over the keys) streams its slice 1 stage
# deep too: Q, K, V and the output's staging tile then fit two CTAs per SM. H200, 2 -> 1 stage
# (benchmarks/decode_split_kv/results/tiles-probe-decode-h200-2026-11-26.json): llama3-8b t2048 0.0170 -> 0.0162
# ms, t8192 0.0415 -> 0.0409, t32768 0.1278 -> 0.1270, 70b t8192 0.0702 -> 0.0700, GPT-2 t2048
# 0.0077 -> 0.0075, gqa 8b t8192 0.0181 -> 0.0174; 64-key, 256-key and deeper variants lost or tied.
DECODE_TILES = FLASH_TILES
# Attention whose heads pass 128 (Gemma's d_h 256; MLA's q.k over 192): 128 keys a block, one stage
# (Q, K, V and O's staging tile: 192 KiB at d_h 256; 168 registers, no spill). At the defaults' two
# stages K and V take 256 KiB: the flash option was refused and such attention ran on_chip in 4
# kernels (issue 51: 0.38x FlexAttention at h16 t4096, 0.24x torch at Gemma's t2048). H200
# (benchmarks/attention_tiles/results/large-heads-h200-2026-11-30.json, each plan judged), against
# 64 keys 2 stages / 64 keys 1 stage / 64 rows on 128 threads: Gemma 2 causal t2048 bf16 0.1002 ms
# against 0.1077 / 0.1072 / 0.1225 (cuDNN 0.0907: 0.91x; torch.compile 0.26), causal t4096 0.3019
# against 0.3255 / 0.3229 / 0.3921 (cuDNN 0.2882: 0.95x), unmasked t2048 0.1281 (cuDNN 0.1190).
FLASH_LARGE_HEAD_TILES = {"block_n": 128, "stages": 1}
FLASH_LARGE_HEAD = 128
# A GEMM takes 128 x 256 tiles (LARGE_GEMM_TILES) when they make at least this many CTAs: about
# one full wave of the H200's 132 SMs. At 1024 x 4096 x 4096 (128 such tiles) they ran 0.054 ms
# against 0.087 ms for 128 x 128 x 2 stages (benchmarks/split_row/results/suite-quick-2026-11-25-split-row.md:
# matmul_published and rmsnorm_published, tuned against default).
LARGE_GEMM_CTAS = 120
# A dual GEMM (two accumulators: 128 x 256 tiles do not fit) on such a shape: the default 128 x 128
# tiles, 4 stages deep. H200, against 2 stages (benchmarks/default_tiles/tiles_probe.py, its results/tiles-probe-
# dual-h200-2026-11-26.json): swiglu 2048 x 4096 x 14336 0.8514 -> 0.7894 ms (torch.compile
# 0.776), geglu 0.8545 -> 0.7886, rmsnorm_mlp's 0.8497 -> 0.7876, llama3-70b 2048 x 8192 x 28672
# 3.3315 -> 3.0792 (128 x 192 at 3 stages: 2.9821, but 0.8049 on geglu 8b); 32-deep k steps lose.
DUAL_LARGE_GEMM_TILES = {"stages": 4}
# A large GEMM whose epilogue reduces over its whole column axis (fuse_row_epilogue: a GroupNorm's
# 128 channels) has its column tile fixed to that axis: 256 rows a tile instead (each consumer
# warpgroup 128 x 128, the share a 128 x 256 tile gives it). H200, GEMM + GroupNorm 8192 x 4096 x 32
# x 128: 0.5075 ms at 128 rows, 0.4552 at 256 (torch.compile 0.4788), 0.4586 at 256 and 3 stages
# (benchmarks/gemm_tiles/results/gemm-tiles-probe-h200-2026-11-30.json); at 128 x 512 x 8 x 128 (32
# CTAs) 128 rows stay (0.0056 against 0.0086: not a large GEMM).
ROW_EPILOGUE_TILES = {"block_m": 256, "stages": 4}
ROW_EPILOGUE_WIDE_MAX = 128  # the widest fixed column tile measured at 256 rows
# Every other GEMM on 128 x 128 tiles (not skinny, not large, not split): 3 stages, not 2. H200,
# 2 -> 3 stages (benchmarks/default_tiles/results/tiles-probe-gemm-stages-h200-2026-11-26.json): GPT-2 c_proj
# 2048 x 3072 x 768 0.0236 -> 0.0195 ms (4 stages 0.0238), swiglu llama3-8b m128 0.0724 ->
# 0.0627, mistral m128 bf16 0.0696 -> 0.0608, rmsnorm_mlp m128 0.0732 -> 0.0642, its 70b shape
# 0.2807 -> 0.2554; the published swiglu and geglu 1024 x 2048 x 2048 0.0278 -> 0.0276.
GEMM_TILES = {"stages": 3}
# A softmax whose rows are streamed (too long for registers: a vocabulary), its statistics and
# normalising kernels on 64-row tiles, not 128. H200, same process (benchmarks/default_tiles/results/
# tiles-probe-softmax-h200-2026-11-26-new.json): 4096 x 65536 0.4593 -> 0.3890 ms, llama3 vocab
# 2048 x 128256 0.4453 -> 0.3875 (bf16 0.4544 -> 0.3925), GPT-2 vocab 2048 x 50257 0.3725 ->
# 0.3236; 32 and 16 rows won by up to 4% on the vocabularies and lost 6% on 4096 x 65536;
# 16 x 128256 is level.
SOFTMAX_ROW_TILES = {"block_m": 64}
# The same, over rows no multiple of 16 bytes long (GPT-2's 50257-wide vocabulary): 2 x 1024
# tiles on 128 threads (4 x 1024 until 2026-11-27, below). The normalising kernel copies such
# rows through emit.unaligned's windows, which cost a fill, a barrier and up to two extra
# granules per tile row: wide tiles amortise them. H200, same process, against the 64 x 128
# default before (benchmarks/unaligned_rows/results/softmax-unaligned-tiles-h200-2026-11-27.json): 2048 x 50257 0.2910 -> 0.2652 ms (bf16 0.2918 ->
# 0.2662), 16 x 50257 0.0091 -> 0.0073, 4096 x 32001 0.3744 -> 0.2881, 512 x 100001 0.1543 ->
# 0.1154, 8192 x 50257 1.1071 -> 0.8795. On aligned rows these tiles were level (H100, tiles-probe-
# softmax-h100-2026-11-27.json: 4096 x 65536 0.5475 -> 0.5458, 2048 x 128256 0.5365 -> 0.5399):
# those keep the 64-row tiles. 2-row tiles: the cost model then picks the statistics split over
# the row (16 slices) at 2048 rows, as at 16 and 512; the same H200 run had them faster on every
# shape but one, level (4096 x 32001 0.2881 -> 0.2887), and a second run of the plans the default
# now makes against the 4 x 1024 ones (softmax-unaligned-2-rows-h200-2026-11-27.json): 2048 x
# 50257 0.2685 -> 0.2212 ms (bf16 0.2680 -> 0.2213; unsplit at 2 rows 0.2317), 8192 x 50257
# 0.8777 -> 0.8573, 16 x 50257 0.0073 -> 0.0059.
UNALIGNED_SOFTMAX_ROW_TILES = {"block_m": 2, "block_n": 1024, "threads": 128}
# The one GEMM of a graph with more than 64 rows whose 128 x 128 grid is under a wave (a prompt
# or a batch of 65..~500 tokens): 64-row tiles on one warpgroup, 6 stages deep (128-deep k
# steps over a long contraction: WAVE_DEEP_K, below), as many CTAs as
# fit one wave (wave_tiles): every SM streams the weight and no split over k is needed (its
# partial sums cost as much as the weight's bytes at these shapes). H100, same process
# (benchmarks/one_wave_tiles/results/split-probe-m128-h100-2026-11-26*.json): 128 x 4096 x 4096 split in 4 at
# 128 x 128 0.0188 ms -> 64 x 64 unsplit 0.0128 (cuBLAS 0.0147; 64 x 128 0.0172); rmsnorm ->
# 128 x 4096 x 6144 (64 x 64: 192 CTAs, over a wave) split 0.0288 -> 64 x 128 0.0236-0.0241
# (64 x 64 0.0314, torch.compile 0.0233); layernorm -> GEMM -> gelu 128 x 768 x 3072 0.0096 ->
# 64 x 64 0.0065-0.0067 (torch.compile 0.0074); 256 x 4096 x 4096 128 x 128 0.0287 -> 64 x 128
# 0.0191 (cuBLAS 0.0173); rmsnorm -> 200 x 4096 x 6144 (64 x 128: 192 CTAs) 128 x 128 0.0348 -> 64 x
# 192 0.0280 (split-probe-wave-h100-2026-11-26*.json); GPT-2's c_proj 2048 x 3072 x 768 (96 CTAs
# of 128 x 128) 0.0222 -> 64 x 192 0.0188 (4 stages 0.0182; cuBLAS 0.0172: split-probe-cproj-h100-
# 2026-11-26-192.json). 128-row tiles of 64 or 96 columns lost wherever they were tried (128 x 4096
# x 4096: 0.0213, 0.0230; c_proj 0.0247).
WAVE_TILES = {"block_m": 64, "threads": 128, "stages": 6}
# 96 columns: rmsnorm -> 128 x 4096 x 6144 on 128 CTAs of 64 x 96 (a wave) rather than 96 of 64 x
# 128, 0.0201 -> 0.0192 ms (H200, 128-deep k steps, 4 stages; 64 x 64, 192 CTAs: 0.0262;
# benchmarks/one_wave_tiles/results/tiles-probe-wave-96-columns-h200-2026-11-27.json)
WAVE_COLUMNS = (64, 96, 128, 192)
# Over a contraction of WAVE_DEEP_K or more, those tiles take 128-deep k steps, as many stages as
# fit WAVE_DEEP_BYTES of shared memory, at most 4: half the k steps, each wgmma chain twice as
# long, for one warpgroup that waits on every step. H200, one process (benchmarks/one_wave_tiles/results/
# tiles-probe-wave-deep-k-h200-2026-11-27.json), 64-deep x 6 stages -> 128-deep: llama3-8b o_proj
# 128 x 4096 x 4096 (64 x 64) 0.0129 -> 0.0111 ms at 4 stages (0.0109 at 6; cuBLAS 0.0129);
# GPT-2 c_attn 128 x 768 x 2304 (64 x 64) 0.0040 -> 0.0037 (3 stages 0.0036); GPT-2 c_proj
# 2048 x 3072 x 768 (64 x 192) 0.0196 -> 0.0181 at 3 stages (cuBLAS 0.0167); rmsnorm -> 128 x
# 4096 x 6144 (64 x 128) 0.0210 -> 0.0197 at 4 (3 stages 0.0212); layernorm -> GEMM -> gelu
# 128 x 768 x 3072 level (0.0058 -> 0.0057). Two stages lost everywhere (o_proj 0.0145).
WAVE_DEEP_K = 512
WAVE_DEEP_BLOCK_K = 128
WAVE_DEEP_BYTES = 192 * 1024
# The one GEMM of a graph with an epilogue, of 16-bit operands in TMA-able rows, over a short
# contraction (at most PINGPONG_MAX_CONTRACTION): the ping-pong schedule (plan.passes.pingpong,
# emit.pingpong), whose epilogue runs under the other warpgroup's mainloop (pingpong_fits). H200,
# same process (benchmarks/pingpong/results/pingpong-2026-11-27.md, pingpong-policy-h200-2026-11-27.json):
# - an op reads the GEMM (bias + gelu) and there are two 128 x 128 tiles per SM or more: before
#   any other tiles. layernorm -> GEMM -> gelu at GPT-2 2048 x 768 x 3072 bf16 (384 tiles)
#   0.0265 -> 0.0214 ms against 128 x 128 x 3 stages, at 8192 x 768 x 3072 0.1060 (128 x 256,
#   the suite) -> 0.0866; at 1024 x 1024 x 4096 (256 tiles) level with 128 x 256 (0.0193 ->
#   0.0186 once, 0.0190 -> 0.0196 and 0.0191 -> 0.0195 since): kept plain.
# - an epilogue of a norm's row scale alone, or fewer tiles: only where the plain kernel takes
#   128 x 128 tiles (no wide tiles, no one-wave tiles) and a wave of them. rmsnorm -> GEMM
#   2048 x 768 x 3072 0.0239 -> 0.0198, 1500 x 1024 x 1528 (144 tiles) 0.0210 -> 0.0182; where
#   the wide tiles fill the GPU they stay (rmsnorm 4096 x 1024 x 4096: 128 x 256 0.0646, ping-pong
#   0.0659).
# Longer contractions lose (rmsnorm -> GEMM 2048 x 4096 x 6144 0.1728 -> 0.1836), as do grids
# under a wave (GPT-2's c_proj, 96 tiles: 0.0197 -> 0.0252; lnlg 1000 x 776 x 1000, 64 tiles:
# 0.0114 -> 0.0126).
PINGPONG_TILES = {"block_m": PINGPONG_BLOCK_M, "block_n": 128, "stages": 4, "threads": PINGPONG_THREADS, "pingpong": 1}
PINGPONG_MAX_CONTRACTION = 1024
# A swapped GEMM (SWAP_AB_TILES) on few column tiles and too short to split: see swap_columns.
SWAP_NARROW_TILES = {"block_n": 64}


def shape_tiles(cx: Ctx, picked: list, swap: bool = True, pow2: bool = False) -> dict:
    """Default tiles for the shape: GEMMs whose rows all fit 16, of 16-bit operands (and no
    attention), the swapped 16 x 128 tiles (SWAP_AB_TILES; with `swap` False, where a GEMM
    kernel cannot swap, what follows); a GEMM or attention whose rows (m, t_q) all fit 64
    64-row tiles on one warpgroup (SMALL_M_TILES; a GEMM also 256 columns and 3 stages),
    attention 1 stage (FLASH_TILES) and, by its shape, wider key tiles or smaller query tiles
    (flash_tiles), a streamed softmax row 64-row tiles (SOFTMAX_ROW_TILES; 2 x 1024 where a row
    is no multiple of 16 bytes: UNALIGNED_SOFTMAX_ROW_TILES), a large GEMM
    128 x 256 tiles (LARGE_GEMM_TILES), a lone GEMM under a wave of 128 x 128 tiles one wave
    of 64-row tiles (wave_tiles), a GEMM split over k 4 stages (SPLIT_GEMM_TILES), any
    other GEMM 3 stages (GEMM_TILES). With `pow2`, blocks are powers of two only (a kernel that
    reduces a tile filled elementwise: plan.verify.reduce_layout_problem)."""
    backward = [c.site for c in picked if isinstance(c.site, FlashBackwardSite)]
    if backward:
        return dict(FLASH_BACKWARD_WIDE_TILES if all(_backward_ctas(cx, s, 128) >= cx.target.sms for s in backward)
                    else FLASH_BACKWARD_TILES)
    matmuls = [n for n in cx.nodes if isinstance(n, ir.Matmul)]
    rows = [gemm_rows(cx, n) for n in matmuls]
    flash_site = any(isinstance(c.site, FlashSite) for c in picked)
    if swap and matmuls and all(swap_rows(cx, n) for n in matmuls) and not flash_site:
        return {**SMALL_M_TILES, **SWAP_AB_TILES, **swap_columns(cx, picked)}
    if rows and max(rows) <= 64:
        # wide tiles for a single GEMM only: attention's K tile, or a dual GEMM's two 64 x 256
        # accumulators on 128 threads (256 registers each: spilled; swiglu m=16 ran 0.32 ms
        # against torch.compile's 0.062), keep the default columns
        narrow = any(isinstance(c.site, FlashSite) or getattr(c, "dual", False) for c in picked)
        # decode (attention alone) streams its slice of the keys 1 stage deep, as prefill does
        # (DECODE_TILES); a GEMM keeps its stages
        decode = narrow and not any(isinstance(c, K.GemmChoice) for c in picked)
        return {**SMALL_M_TILES, **({} if narrow else SMALL_M_GEMM_TILES), **(DECODE_TILES if decode else {})}
    flash = [c for c in picked if isinstance(c, K.OnlineChoice) and isinstance(c.site, FlashSite)]
    if flash and not any(isinstance(c, K.GemmChoice) for c in picked):
        return {**FLASH_TILES, **flash_tiles(cx, flash)}
    if not rows:  # no contraction at all (a plain matmul has no GemmChoice: look at the nodes)
        softmax_rows = [c.site for c in picked if isinstance(c, K.OnlineChoice) and isinstance(c.site, SoftmaxSite)]
        if not softmax_rows:
            return {}
        unaligned = any(cx.axes[s.axis] * DTYPE_BYTES.get(cx.dtype_of(i), 4) % 16
                        for s in softmax_rows for i in (s.src, s.div))
        return dict(UNALIGNED_SOFTMAX_ROW_TILES if unaligned else SOFTMAX_ROW_TILES)
    if pingpong_fits(cx, picked, 2 * cx.target.sms, read=True):
        return dict(PINGPONG_TILES)
    if _large_gemm(cx) and _narrow_row_epilogues(cx, picked):
        return dict(ROW_EPILOGUE_TILES)
    if _large_gemm(cx):
        dual = any(getattr(c, "dual", False) for c in picked)
        return dict(DUAL_LARGE_GEMM_TILES if dual else LARGE_GEMM_TILES)
    if wave := wave_tiles(cx, pow2):
        return wave
    if pingpong_fits(cx, picked, cx.target.sms, read=False):  # where the plain kernel takes 128 x 128 tiles (below)
        return dict(PINGPONG_TILES)
    # a GEMM split over k streams its slice with few CTAs per SM: a deeper pipeline hides the
    # loads' latency (H200: 128 x 4096 x 4096 in 8 slices 0.0237 ms at 2 stages, 0.0212 at 4;
    # 256 x 524288 x 256 0.206 at 2, 0.183 at 3)
    return dict(SPLIT_GEMM_TILES if any(isinstance(c, K.GemmChoice) and c.split for c in picked) else GEMM_TILES)


def swap_columns(cx: Ctx, picked: list) -> dict:
    """Swapped tiles of 64 columns where the GEMMs are not split (a contraction too short to
    split) and 128-column tiles leave more than half the SMs idle: twice the CTAs streaming the
    weight. H100, layernorm -> GEMM -> gelu at GPT-2 m = 1 (768 x 3072: 24 tiles of 128)
    0.0064 -> 0.0054 ms (torch.compile 0.0064; benchmarks/swap_ab/results/tiles-probe-swap-h100-2026-11-26.json);
    the slice kernel of 1 x 4096 x 6144 unsplit (48 tiles) 0.0188 -> 0.0186 (swap-ab-probe-h100-
    2026-11-26.json). Split, 64 columns lost: that GEMM in two slices 0.0199 -> 0.0238."""
    if any(isinstance(c, K.GemmChoice) and c.split for c in picked):
        return {}
    cols = [gemm_cols(cx, n) for n in cx.nodes if isinstance(n, ir.Matmul)]
    block = SWAP_AB_TILES["block_n"]
    return SWAP_NARROW_TILES if 2 * max(math.ceil(c / block) for c in cols) <= cx.target.sms else {}


def wave_tiles(cx: Ctx, pow2: bool = False) -> dict:
    """WAVE_TILES with the fewest columns per tile (WAVE_COLUMNS) whose grid fills more than half
    a wave and at most one (128-deep k steps over a long contraction: WAVE_DEEP_K), for a graph of
    one contraction (no dual GEMM, no attention) of more than 64 rows, 16-bit operands, whose
    128 x 128 grid leaves SMs idle; {} elsewhere. Judged on the graph alone, so the split rule
    (engine._gemm_options) and the plan's tiles agree. With `pow2`, power-of-two columns only."""
    matmuls = [n for n in cx.nodes if isinstance(n, ir.Matmul)]
    if len(matmuls) != 1 or gemm_rows(cx, matmuls[0]) <= 64:
        return {}
    mm = matmuls[0]
    # 16-bit operands only: measured so, and float32 tiles 6 stages deep do not fit shared memory
    # (the plan would fall back to the plain defaults while the split rule judged at these tiles)
    if not {cx.dtype_of(mm.a), cx.dtype_of(mm.b)} <= SWAP_DTYPES:
        return {}
    if _ctas(cx, mm, 128, 128) >= cx.target.sms:
        return {}
    # more than half a wave (fewer: a split over k fills the GPU better, split._splits), at most one
    fits = [c for c in WAVE_COLUMNS if not (pow2 and c & (c - 1)) and
            cx.target.sms < 2 * _ctas(cx, mm, WAVE_TILES["block_m"], c) and
            _ctas(cx, mm, WAVE_TILES["block_m"], c) <= cx.target.sms]
    if not fits:
        return {}
    if cx.axes[mm.axis_a] < WAVE_DEEP_K:
        return {**WAVE_TILES, "block_n": fits[0]}
    step = WAVE_DEEP_BLOCK_K * (WAVE_TILES["block_m"] + fits[0]) * 2  # a k step's A and B blocks, 16-bit
    return {**WAVE_TILES, "block_n": fits[0], "block_k": WAVE_DEEP_BLOCK_K,
            "stages": min(4, WAVE_DEEP_BYTES // step)}


def _ctas(cx: Ctx, mm: ir.Matmul, block_m: int, block_n: int) -> int:
    """CTAs of a contraction's output at block_m rows x block_n columns (other axes: one each)."""
    row, col = _row_col(cx, mm)
    block = {row: block_m, col: block_n}
    return math.prod(math.ceil(cx.axes[a] / block.get(a, 1)) for a in mm.axes)


def _row_col(cx: Ctx, mm: ir.Matmul) -> tuple[str | None, str | None]:
    """A contraction's row axis (the last of its LHS alone) and column axis (the last of its RHS
    alone); None where it has none."""
    a, b = cx.node(mm.a).axes, cx.node(mm.b).axes
    rows = [x for x in mm.axes if x in a and x not in b]
    cols = [x for x in mm.axes if x in b and x not in a]
    return (rows[-1] if rows else None), (cols[-1] if cols else None)


def flash_tiles(cx: Ctx, flash: list) -> dict:
    """The key and query tiles of a plan of unsplit flash kernels, from their shapes: every
    kernel must qualify (one `tiles` serves the plan). Masked attention (a key bound, skipped
    tiles) takes only the overlapped schedule; split-kv (decode) keeps the defaults."""
    if any(c.split for c in flash):
        return {}
    masked = any(c.skip or c.site.bounds or c.site.skip_at for c in flash)
    heads = [cx.axes[cx.node(c.site.qk).axis_a] for c in flash]
    if any(max(h, cx.axes[cx.node(c.site.pv).axes[-1]]) > FLASH_LARGE_HEAD for h, c in zip(heads, flash)):
        return dict(FLASH_LARGE_HEAD_TILES)  # q.k's heads or O's (its last axis: query_tiles)
    keys = min(cx.axes[c.site.axis] for c in flash)
    # plan.passes.overlap_parts' conditions that the graph shows: MMA-shaped heads, 16-bit
    # operands, no extra tile per key block (a leaf along the keys: a bias, document ids), one
    # head per CTA. A leaf the CTA reads once (ALiBi's slope per head) leaves the cut as it is
    overlappable = (all(16 <= h <= 128 and h % 16 == 0 for h in heads)
                    and all(cx.dtype_of(c.site.qk) in ir.HALF_DTYPES for c in flash)
                    and not any(c.pack or any(c.site.axis in cx.node(x).axes for x in c.site.leaves)
                                for c in flash))
    if not masked and all(64 < h <= 128 for h in heads) and keys >= FLASH_WIDE_KEYS:
        return dict(FLASH_OVERLAP_TILES if overlappable else FLASH_WIDE_TILES)
    if not masked and all(h <= 64 for h in heads) and max(query_tiles(cx, c.site, 128) for c in flash) < cx.target.sms:
        return dict(FLASH_SMALL_GRID_TILES)
    if overlappable and keys > (FLASH_OVERLAP_MASKED_MIN_KEYS if masked else FLASH_OVERLAP_MIN_KEYS):
        return dict(FLASH_OVERLAP_TILES)
    return {}


def query_tiles(cx: Ctx, site: FlashSite, block_m: int) -> int:
    """CTAs of the site's flash kernel at `block_m` query rows: its output's axes but the head
    dimension (the last) are the grid, the query axis in blocks."""
    out = cx.node(site.pv).axes
    batch = math.prod(cx.axes[a] for a in out[:-1] if a != site.row)
    return batch * math.ceil(cx.axes[site.row] / block_m) if site.row else batch


def gemm_rows(cx: Ctx, mm: ir.Matmul) -> int:
    """The extent of a contraction's row axis (of its LHS alone), 1 if it has none."""
    row = _row_col(cx, mm)[0]
    return cx.axes[row] if row else 1


def swap_rows(cx: Ctx, mm: ir.Matmul) -> bool:
    """Whether a contraction takes the swapped tiles by its shape (SWAP_AB_TILES): at most
    SWAP_AB_ROWS rows and 16-bit operands (plan.passes.SWAP_DTYPES)."""
    return gemm_rows(cx, mm) <= SWAP_AB_ROWS and {cx.dtype_of(mm.a), cx.dtype_of(mm.b)} <= SWAP_DTYPES


def gemm_cols(cx: Ctx, mm: ir.Matmul) -> int:
    """The extent of a contraction's column axis (of its RHS alone), 1 if it has none."""
    col = _row_col(cx, mm)[1]
    return cx.axes[col] if col else 1


def pingpong_fits(cx: Ctx, picked: list, min_tiles: int, read: bool) -> bool:
    """Whether the graph's shape takes PINGPONG_TILES: one contraction with an epilogue to hide
    (some op reads it; unless `read`, also a norm's row scale pulled out to it), no dual GEMM,
    split or attention, 16-bit operands whose rows are whole 16-byte granules (TMA), a
    contraction of at most PINGPONG_MAX_CONTRACTION, and at least min_tiles 128 x 128 output
    tiles. The plan pass still decides per kernel (pingpong_parts)."""
    matmuls = [n for n in cx.nodes if isinstance(n, ir.Matmul)]
    if len(matmuls) != 1 or any(getattr(c, "dual", False) or getattr(c, "split", False)
                                or isinstance(c.site, FlashSite) for c in picked):
        return False
    mm = matmuls[0]
    # a bare GEMM (no epilogue to hide) is at cuBLAS level already: kept
    scaled = any(isinstance(c, K.GemmChoice) and c.scale for c in picked)  # scale_pullout
    if not cx.g.users()[mm.id] and (read or not scaled):
        return False
    a, b = cx.node(mm.a), cx.node(mm.b)
    contracted = (set(a.axes) & set(b.axes)) - set(mm.axes)
    if (not contracted or {cx.dtype_of(mm.a), cx.dtype_of(mm.b)} - PINGPONG_DTYPES
            or math.prod(cx.axes[x] for x in contracted) > PINGPONG_MAX_CONTRACTION):
        return False
    if any(cx.axes[n.axes[-1]] * DTYPE_BYTES[cx.dtype_of(n.id)] % 16 for n in (a, b) if n.axes):
        return False
    return _ctas(cx, mm, 128, 128) >= min_tiles


def _narrow_row_epilogues(cx: Ctx, picked: list) -> bool:
    """Whether every GEMM of the plan reduces its whole column axis in its epilogue
    (fuse_row_epilogue: one matmul, never split) over at most ROW_EPILOGUE_WIDE_MAX padded
    columns, and no attention or other contraction shares the tiles."""
    gemms = [c for c in picked if isinstance(c, K.GemmChoice)]
    if not gemms or len(gemms) != sum(isinstance(n, ir.Matmul) for n in cx.nodes):
        return False
    return all(c.rows and padded(cx.axes[cx.node(c.site.matmuls[0]).axes[-1]]) <= ROW_EPILOGUE_WIDE_MAX
               for c in gemms)


def _large_gemm(cx: Ctx) -> bool:
    """A contraction whose output fills the GPU with 128 x 256 tiles (LARGE_GEMM_CTAS of them),
    unless their last wave idles a quarter of the GPU or more where 128 x 128 tiles fill their
    waves (wave_fill): GPT-2's MLP 2048 x 768 x 3072 (192 CTAs: 1.45 waves) ran layernorm -> GEMM
    -> gelu in 0.0300 ms at 128 x 256 and 0.0281 at 128 x 128 x 3 stages (384: 2.9 waves; bf16 0.0299
    -> 0.0278), while 1024 x 1024 x 4096 (128 CTAs) kept 128 x 256 (0.0198 against 0.0220; H100,
    benchmarks/large_gemm_wave_fill/results/tiles-probe-lnlg-h100-2026-11-26.json)."""
    for n in cx.nodes:
        if isinstance(n, ir.Matmul) and len(n.axes) >= 2:
            sizes = sorted((cx.axes[x] for x in n.axes), reverse=True)
            batch = math.prod(sizes[2:])
            wide = math.ceil(sizes[1] / 128) * math.ceil(sizes[0] / 256) * batch
            square = math.ceil(sizes[1] / 128) * math.ceil(sizes[0] / 128) * batch
            if wide >= LARGE_GEMM_CTAS and not (wave_fill(wide, cx.target.sms) < 0.75 and wave_fill(square, cx.target.sms) >= 0.9):
                return True
    return False


def wave_fill(ctas: int, sms: int) -> float:
    """The share of SMs busy over a grid's waves: ctas / (waves * sms)."""
    return ctas / (math.ceil(ctas / sms) * sms)


def gemm_judging_tiles(cx: Ctx) -> dict:
    """The columns a plain (non-skinny) GEMM of this graph runs at, as far as the graph alone
    decides them (shape_tiles): 256 where a large GEMM gives the plan LARGE_GEMM_TILES, which every
    GEMM kernel of the plan then takes. The split rule judges a GEMM's grid at these: an LM head's
    training step in chunks of 512 tokens ran its dH GEMM (512 x 4096 over 128256) on 64 CTAs of
    128 x 256 unsplit, judged at 128 x 128 (128 CTAs: no split)."""
    return dict(LARGE_GEMM_TILES) if _large_gemm(cx) else {}
