#!/bin/bash
# Issue 51 after the backward skips the causal key blocks of ALiBi, document masking and MLA (their scale
# comes after the mask in the cotangent's chain; g61: without it 0.42x-0.68x FlexAttention's training step):
# the variants' training steps again, then a campaign over attention backward (seed 121).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g62}; mkdir -p $O
timeout 170 python -m leantile bench --suite train --tag variants --time-budget 140 --out $O/train > $O/train.log 2>&1
echo "train rc=$?" >> $O/rc.txt
timeout 100 python benchmarks/gpu_fuzz.py --families attention_backward --dtypes f16,bf16,f32 \
  --budget-s 50 --drain-s 40 --seed 121 --tag bwd-skip --out $O/fuzz > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g62}.tgz -C $OUT ${TAG:-g62}; grep "^|" $O/train/*.md | cut -c1-300 | head -8
grep -v "INFO\|WARN" $O/fuzz.log | grep "plans:"; cat $O/rc.txt
