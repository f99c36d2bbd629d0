#!/usr/bin/env bash
# h100-x1: ZeRO-3 built-in against DeepSpeed's leaf-module granularity threshold, three fresh jobs each
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L; nproc
for i in 1 2 3; do
  for s in zero3 zero3_leaf zero3_leaf_tuned; do
    timeout 150 python3 -m acceptance.cli.bench_train --profile .gpu/h100-z3leaf.yaml --strategies $s --evidence $OUT/b-$s-$i > $OUT/b-$s-$i.txt 2>&1
    echo "run $i $s rc=$?"; grep -E "^zero3|FAILED" $OUT/b-$s-$i.txt
  done
done
grep -h "z3_leaf_module\|granularity" $OUT/b-zero3_leaf-1/probes/*/logs/*/attempt_0/0/*.log | head -5
cd $OUT && tar czf bench.tgz b-* && rm -rf b-zero3*-? && ls
