#!/bin/bash
# Issue 51: where document masking's and soft-capping's time goes (each kernel from the torch profiler), document
# masking with and without mask_bounds, and why the suite found no FlexAttention path for soft-capping.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g52}; mkdir -p $O
timeout 400 python benchmarks/attention_variants/probe.py --out $O --no-mask-bounds document_attention_t4096 \
  softcap_attention_t4096 alibi_attention_t4096 > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g52}.tgz -C $OUT ${TAG:-g52}
tail -n 12 $O/probe.log
cat $O/rc.txt
