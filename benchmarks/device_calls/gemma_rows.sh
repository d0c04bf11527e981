#!/bin/bash
# Issue 51's d_h 256 rows through the suite (shipped defaults, judged, against cuDNN / FA2 SDPA and now
# FlexAttention with the causal block mask: 835dfd8), then the causal d_h 128 rows for FlexAttention's figure.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g49; mkdir -p $O
timeout 540 python -m leantile bench --suite full --time-budget 460 --out $O/suite --tag \
  causal_attention_gemma2_9b_prefill_t2048_bf16 causal_attention_gemma2_9b_prefill_t4096 attention_gemma2_9b_prefill_t2048 \
  causal_attention_llama3_8b_prefill_t2048 causal_attention_gpt2_prefill_t1024_bf16 > $O/suite.log 2>&1; echo "suite rc=$?" >> $O/rc.txt
tar czf $OUT/g49.tgz -C $OUT g49; grep "^|" $O/suite/*.md | head -20; grep -v "INFO\|WARN" $O/suite.log | tail -n 6; cat $O/rc.txt
