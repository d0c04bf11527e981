#!/bin/bash
# After 1e78edf (atomic dQ: dS zeroed at the dK/dV tile's padded keys), fd9a01b (atomic dQ not offered where its
# dK/dV kernel cannot lower) and 5227358 (bf16 values carrying a constant bf16 cannot hold stored in float32;
# masks now also drawn additive): the campaign over the attention and backward families (seed 122), then
# the train suite's attention rows and variants (the whole step against cuDNN / FlexAttention).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g63}; mkdir -p $O
timeout 300 python benchmarks/gpu_fuzz.py --families attention_backward,backward,masked_attention,user_attention \
  --dtypes f16,bf16,f32,mixed --budget-s 220 --drain-s 60 --seed 122 --tag after-fixes --out $O/fuzz > $O/fuzz.log 2>&1
echo "fuzz rc=$?" >> $O/rc.txt
timeout 250 python -m leantile bench --suite train --tag attention variants --time-budget 200 --out $O/train > $O/train.log 2>&1
echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g63}.tgz -C $OUT ${TAG:-g63}; grep -v "INFO\|WARN" $O/fuzz.log | grep "plans:"
grep "^|" $O/train/*.md | cut -c1-300 | head -12; cat $O/rc.txt
