#!/bin/bash
# The LM head's fused step at 8 chunks of 1024 tokens with dlogits written over the logits
# (plan.storage.written_over) and no zero gradients made by autograd (g39: 48.3 ms at 1024 against
# torch.compile's 41.0; backward peak twice the gradients): each kernel's time and the memory by
# phase; the fused-loss GPU test (dW added in place on the GPU); the GPU campaign s108 over the new
# loss_steps family (training steps in one graph, dlogits over logits) and the row families.
source .devbundle/activate.sh && export PYTHONPATH=$PWD/python:$PYTHONPATH
O=$OUT/g40; mkdir -p $O
timeout 220 python benchmarks/train_rows/step_kernels.py --out $O lm_head_ce > $O/kernels.log 2>&1; echo "kernels rc=$?" >> $O/rc.txt
timeout 150 python -m pytest -m gpu -q -x tests/gpu/test_chunked_gpu.py -k "fused_loss" > $O/gpu-tests.txt 2>&1; echo "gpu tests rc=$?" >> $O/rc.txt
timeout 190 python benchmarks/gpu_fuzz.py --families loss_steps,row_epilogues,user_softmax,backward --dtypes f16,bf16,f32 --budget-s 120 --drain-s 40 --seed 108 --tag loss-steps --out $O > $O/fuzz.log 2>&1; echo "fuzz rc=$?" >> $O/rc.txt
tar czf $OUT/g40.tgz -C $OUT g40; grep -v "INFO\|WARN\|Warning\|warn" $O/kernels.log | head -30; tail -n 4 $O/gpu-tests.txt; grep -v "INFO\|WARN" $O/fuzz.log | tail -n 12; cat $O/rc.txt
