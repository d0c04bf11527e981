#!/bin/bash
# The GPU campaign over the large_head_attention family (heads of 144..256 kept while the rest is resized:
# one flash kernel at FLASH_LARGE_HEAD_TILES, 128 keys 1 stage) in 16-bit, every candidate judged.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g48; mkdir -p $O
timeout 300 python benchmarks/gpu_fuzz.py --families large_head_attention --dtypes f16,bf16 \
  --budget-s 200 --drain-s 60 --seed 111 --tag large-head-attention --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g48.tgz -C $OUT g48; grep -v "INFO\|WARN" $O/fuzz.log | tail -n 14; cat $O/rc.txt
