#!/bin/bash
# Issue 51 after mask_bounds' interior flag (14f4b6c: document masking runs its mask on boundary blocks only):
# the variants' GPU test (written 2026-11-30, never run), the two document-masking rows of the suite, the
# probe's kernels, then the GPU campaign over the masked / user attention families (mask kinds documents and
# segments: the interior flag's rows whole and not), seed 115.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g56}; mkdir -p $O
timeout 150 python -m pytest -q -m gpu tests/gpu/test_attention_variants_gpu.py -x > $O/gpu_tests.log 2>&1; echo "tests rc=$?" >> $O/rc.txt
timeout 170 python -m leantile bench --suite attention-variants --tag document_attention_t4096 document_attention_t16384_h8_bf16 \
  --time-budget 150 --out $O/suite > $O/suite.log 2>&1; echo "suite rc=$?" >> $O/rc.txt
timeout 60 python benchmarks/attention_variants/probe.py --out $O/probe document_attention_t4096 > $O/probe.log 2>&1; echo "probe rc=$?" >> $O/rc.txt
timeout 170 python benchmarks/gpu_fuzz.py --families masked_attention,user_attention --dtypes f16,bf16 --budget-s 120 \
  --drain-s 30 --seed 115 --tag doc-interior --out $O/fuzz > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g56}.tgz -C $OUT ${TAG:-g56}; tail -n 3 $O/gpu_tests.log; grep "^|" $O/suite/*.md | cut -c1-330
grep -v "INFO\|WARN" $O/probe.log | tail -n 12; grep -v "INFO\|WARN" $O/fuzz.log | tail -n 8; cat $O/rc.txt
