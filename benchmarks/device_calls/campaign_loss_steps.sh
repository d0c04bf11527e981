#!/bin/bash
# The GPU campaign over training steps in one graph with long vocabularies (loss_steps since e4432ab:
# plan.storage.written_over and rules.row_tiles.two_pass_block on a GPU, neither judged there by s108),
# then the LM head's train row at HEAD (the long block's gradients judged; the eager op path's first GPU run).
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g43; mkdir -p $O
timeout 300 python benchmarks/gpu_fuzz.py --families loss_steps,row_epilogues --dtypes f16,bf16,f32 --budget-s 220 --drain-s 60 --seed 109 --tag loss-steps-long --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
timeout 240 python -m leantile bench --suite train --tag lm_head --time-budget 200 --out $O/train > $O/train.log 2>&1; echo "train rc=$?" >> $O/rc.txt
tar czf $OUT/g43.tgz -C $OUT g43; grep -v "INFO\|WARN" $O/fuzz.log | tail -n 12; grep "^|" $O/train/*.md; cat $O/rc.txt
