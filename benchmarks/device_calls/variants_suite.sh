#!/bin/bash
# Issue 51: the attention-variants suite (soft-capping, ALiBi, document masking, MLA dims, heads of 256)
# against FlexAttention (its block mask built once ahead; document masking also with the mask built per call),
# cuDNN / FA2 SDPA where they take the case, torch.compile and eager.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/${TAG:-g51}; mkdir -p $O
timeout 560 python -m leantile bench --suite attention-variants --time-budget 500 --out $O/suite > $O/suite.log 2>&1
echo "suite rc=$?" >> $O/rc.txt
tar czf $OUT/${TAG:-g51}.tgz -C $OUT ${TAG:-g51}; grep "^|" $O/suite/*.md | cut -c1-400 | head -20
grep -A8 "^## Summary" $O/suite/*.md; grep -v "INFO\|WARN" $O/suite.log | grep -i "error\|Traceback" | tail -n 5; cat $O/rc.txt
