#!/bin/bash
# The flash option judged at its shape's tiles (1d75937, 2cd8de0) also gave float32 attention with heads of
# 96..128 at few query rows (and some causal t2048) one flash kernel where it ran on_chip (TF32 tensor cores,
# one stage): not judged on a GPU in the sixteenth session. The campaign over attention families in float32.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g50; mkdir -p $O
timeout 540 python benchmarks/gpu_fuzz.py --families overlap_attention,user_attention,masked_attention,large_head_attention \
  --dtypes f32 --budget-s 420 --drain-s 80 --seed 112 --tag f32-attention --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g50.tgz -C $OUT g50; grep -v "INFO\|WARN" $O/fuzz.log | tail -n 12; cat $O/rc.txt
