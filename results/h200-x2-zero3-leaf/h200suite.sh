#!/usr/bin/env bash
# h200-x2: the default suite once (fresh machine, worker on), then ZeRO-3 twice more in fresh bench jobs
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L
start=$(date +%s)
timeout 330 python3 -m pytest -p no:cacheprovider --cluster-profile h200-x2 tests_cluster/ --cluster-evidence $OUT/h200-x2-leaf > $OUT/suite.txt 2>&1
echo "rc=$? wall=$(( $(date +%s) - start ))" >> $OUT/suite.txt
grep -E "^\[cluster\]|passed|failed|verdict|FAIL|^rc=|^(strategy|ddp|fsdp|zero|scaling)" $OUT/suite.txt | tail -40
python3 -m acceptance.cli.walls results/h200-x2-worker/h200-x2-worker-on $OUT/h200-x2-leaf
for i in 2 3; do
  timeout 110 python3 -m acceptance.cli.bench_train --profile h200-x2 --strategies zero3,zero3_tuned --evidence $OUT/bench-$i > $OUT/bench-$i.txt 2>&1
  echo "bench $i rc=$?"; grep -E "^zero3|FAILED" $OUT/bench-$i.txt
done
cd $OUT && tar czf ev.tgz h200-x2-leaf bench-2 bench-3 && rm -rf h200-x2-leaf bench-2 bench-3 && ls -la
