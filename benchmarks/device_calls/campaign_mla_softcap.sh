#!/bin/bash
# The generator classes added on 2026-11-30 (seventeenth) after campaign s113: MLA head dims (values of their own
# head dim, class 21) and soft-capping (tanh in the score function), through the masked, user, shape-tiled and
# attention-backward families (the last: the variants' backward through flash_backward).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g54}; mkdir -p $O
timeout 540 python benchmarks/gpu_fuzz.py --families masked_attention,user_attention,shape_tiled_attention,attention_backward \
  --dtypes f16,bf16 --budget-s 400 --drain-s 80 --seed 114 --tag mla-softcap --out $O > $O/fuzz.log 2>&1
echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g54}.tgz -C $OUT ${TAG:-g54}; grep -v "INFO\|WARN" $O/fuzz.log | tail -n 12; cat $O/rc.txt
