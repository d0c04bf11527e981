#!/bin/bash
# Issue 51 after the document ids' load joined the boundary blocks (a synchronous load on every key block
# before): document masking's probe and both suite rows, campaign s116 over masked / user attention, then
# a short bandwidth probe for issue 49 (map kernels' elements and threads a CTA; on-chip rows a CTA).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g57}; mkdir -p $O
timeout 70 python benchmarks/attention_variants/probe.py --out $O/probe document_attention_t4096 > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
timeout 150 python -m leantile bench --suite attention-variants --tag document_attention_t4096 document_attention_t16384_h8_bf16 \
  --time-budget 100 --out $O/suite > $O/suite.log 2>&1; echo "suite rc=$?" >> $O/rc.txt
timeout 140 python benchmarks/gpu_fuzz.py --families masked_attention,user_attention --dtypes f16,bf16 --budget-s 90 \
  --drain-s 30 --seed 116 --tag doc-loads --out $O/fuzz > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
timeout 160 python benchmarks/row_tiles/probe.py --out $O/bw --budget 140 \
  --settings map_tile=2048,map_tile=4096,map_tile=2048+map_threads=128,map_tile=16384+map_threads=512,1x128,1x256,4x256 \
  fus:sigmoid fus:rmsnorm_gain > $O/bw.log 2>&1; echo "bw rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g57}.tgz -C $OUT ${TAG:-g57}; grep -v "INFO\|WARN" $O/probe.log | grep "shipped\|flex"
grep "^|" $O/suite/*.md | cut -c1-330; grep -v "INFO\|WARN" $O/fuzz.log | grep "plans:"; grep -h "^|" $O/bw.log; cat $O/rc.txt
