#!/bin/bash
# Issue 51's "forward and backward": the four variants' training steps (train_bench's "variants" cases: soft-capping,
# ALiBi, document masking, MLA at h 16, 4096 tokens, f16; gradients of Q, K, V) against FlexAttention's and
# torch.compile's, then a campaign over attention backward and masked attention after e0aa425 (a bf16 select of
# a fill bf16 cannot hold stored in float32; masks now draw the fill -1e9 and score thresholds), seed 120.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g61}; mkdir -p $O
timeout 300 python -m leantile bench --suite train --tag variants --time-budget 240 --out $O/train > $O/train.log 2>&1
echo "train rc=$?" >> $O/rc.txt
timeout 150 python benchmarks/gpu_fuzz.py --families attention_backward,masked_attention --dtypes f16,bf16,mixed \
  --budget-s 90 --drain-s 40 --seed 120 --tag bf16-fill --out $O/fuzz > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g61}.tgz -C $OUT ${TAG:-g61}; grep "^|" $O/train/*.md | cut -c1-400 | head -12
grep -v "INFO\|WARN" $O/train.log | grep -i "error\|Traceback\|not run" | tail -n 5; grep -v "INFO\|WARN" $O/fuzz.log | grep "plans:"; cat $O/rc.txt
