#!/usr/bin/env bash
# h100-x1: per-GPU speed and training (the job staged at the per-GPU speed, as in the suite), each with
# torch.compile's caches empty, alternately with (A) and without (B) the compile pool started in preload
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi -L; nproc
cp acceptance/probes/train_strategies.py /tmp/with_pool.py
for run in A1 B1 A2 B2; do
  case $run in A*) cp /tmp/with_pool.py acceptance/probes/train_strategies.py;; B*) cp .gpu/train_strategies_nopool.py acceptance/probes/train_strategies.py;; esac
  export TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$run TRITON_CACHE_DIR=/tmp/tri-$run
  start=$(date +%s.%N)
  timeout 200 python3 -m pytest -p no:cacheprovider --cluster-profile h100-x1 tests_cluster/test_compute.py tests_cluster/test_training.py --cluster-evidence $OUT/ab-$run > $OUT/suite-$run.txt 2>&1
  echo "rc=$? wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")" >> $OUT/suite-$run.txt
  echo "== $run"; tail -1 $OUT/suite-$run.txt
  python3 -m acceptance.cli.walls $OUT/ab-$run --phases > $OUT/phases-$run.txt
  grep -E "^training +[0-9]|preload|wait for|warm-up" $OUT/phases-$run.txt; python3 -m acceptance.cli.walls $OUT/ab-$run | grep -E "training|suite"
done
cp /tmp/with_pool.py acceptance/probes/train_strategies.py
cd $OUT && tar czf ab.tgz ab-* && rm -rf ab-* && ls
