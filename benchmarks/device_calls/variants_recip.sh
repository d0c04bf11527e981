#!/bin/bash
# Issue 51 after 58befd2 (a score divided by a constant multiplied by its reciprocal where no comparison reads
# it: ALiBi, soft-capping and document masking each paid an IEEE division per score) and 551de2d (per-row
# bounds as let-bound expressions: document masking's flash loop warp-specialised). The variants' rows against
# FlexAttention, then a campaign over masked / user attention and attention backward (seed 119: masks now
# draw score_threshold, a comparison of the scores' own quotient, which must keep its division).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g60}; mkdir -p $O
timeout 340 python -m leantile bench --suite attention-variants --time-budget 290 --out $O/suite \
  --tag softcap_attention_t4096 alibi_attention_t4096 alibi_attention_t2048_bf16 document_attention_t4096 \
  mla_attention_t4096 softcap_attention_gemma2_9b_t2048_bf16 document_attention_t16384_h8_bf16 > $O/suite.log 2>&1
echo "suite rc=$?" >> $O/rc.txt
timeout 200 python benchmarks/gpu_fuzz.py --families masked_attention,user_attention,attention_backward --dtypes f16,bf16,f32 \
  --budget-s 130 --drain-s 50 --seed 119 --tag recip --out $O/fuzz > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g60}.tgz -C $OUT ${TAG:-g60}; grep "^|" $O/suite/*.md | cut -c1-400 | head -14
grep -v "INFO\|WARN" $O/suite.log | grep -i "error\|Traceback\|not run" | tail -n 5; grep -v "INFO\|WARN" $O/fuzz.log | grep "plans:"; cat $O/rc.txt
