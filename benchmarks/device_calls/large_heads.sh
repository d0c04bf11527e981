#!/bin/bash
# Heads past 128 (issue 51: Gemma's d_h 256 ran on_chip in 4 kernels, 0.38x FlexAttention): the flash plan at
# FLASH_LARGE_HEAD_TILES (64 keys, 2 stages) against other tiles and cuDNN / FlashAttention-2 SDPA, every plan
# judged; then the GPU campaign over shape-tiled attention (large heads among its sizes) in 16-bit.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g47; mkdir -p $O
export OUT=$O
TILE_VARIANTS='{"bn64_s1": {"block_n": 64, "stages": 1}, "bn128_s1": {"block_n": 128, "stages": 1}, "bm64_t128": {"block_m": 64, "threads": 128, "block_n": 64, "stages": 2}}' \
  timeout 260 python benchmarks/default_tiles/tiles_probe.py causal_attention_gemma2_9b_prefill_t2048_bf16 \
  causal_attention_gemma2_9b_prefill_t4096 attention_gemma2_9b_prefill_t2048 > $O/tiles.log 2>&1; echo "tiles rc=$?" >> $O/rc.txt
timeout 250 python benchmarks/gpu_fuzz.py --families shape_tiled_attention,overlap_attention --dtypes f16,bf16 \
  --budget-s 170 --drain-s 50 --seed 110 --tag large-heads --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/../g47.tgz -C $OUT/.. g47; grep -v "INFO\|WARN" $O/tiles.log | tail -n 8; grep -v "INFO\|WARN" $O/fuzz.log | tail -n 8; cat $O/rc.txt
