#!/bin/bash
# Attention backward with its GEMMs issued asynchronously (benchmarks/flash_backward/async_gemms.py, a text
# patch of the emitted module; stages released after their wgmma retires: leantile.codegen_retire), against
# the plain plan and SDPA's backward, every case judged (issue 50: 0.77-0.85x cuDNN, criterion 0.9x).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g44; mkdir -p $O
timeout 560 python benchmarks/flash_backward/probe.py --out $O --variants plain,async \
  attention causal_attention gqa_attention sliding_window_attention > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
tar czf $OUT/g44.tgz -C $OUT g44; grep -v "INFO\|WARN" $O/probe.log | tail -n 14; cat $O/rc.txt
