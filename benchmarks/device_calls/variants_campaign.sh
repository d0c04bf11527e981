#!/bin/bash
# Issue 51 after the warp-reduced per-row bounds and the score function's exp2 tanh: document masking, soft-capping
# and ALiBi kernels (probe), then the GPU campaign over the attention families that draw the new mask kinds
# (documents: mask_bounds and per-row run-time bounds; alibi: a slope read once per CTA under FA3's schedule).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g53}; mkdir -p $O
timeout 170 python benchmarks/attention_variants/probe.py --out $O document_attention_t4096 softcap_attention_t4096 \
  softcap_attention_gemma2_9b_t2048_bf16 > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
timeout 330 python benchmarks/gpu_fuzz.py --families masked_attention,user_attention,overlap_attention \
  --dtypes f16,bf16 --budget-s 230 --drain-s 60 --seed 113 --tag variants --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g53}.tgz -C $OUT ${TAG:-g53}
tail -n 12 $O/probe.log
grep -v "INFO\|WARN" $O/fuzz.log | tail -n 12; cat $O/rc.txt
