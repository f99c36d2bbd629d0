#!/usr/bin/env bash
# the matmul ramp: ramp.py on every GPU of the machine, one process per GPU, at once (as the probe runs them)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi -L
n=$(nvidia-smi -L | wc -l)
for g in $(seq 0 $((n - 1))); do
  CUDA_VISIBLE_DEVICES=$g timeout 150 python3 benchmarks/ramp.py $OUT/ramp-gpu$g.json > $OUT/ramp-gpu$g.txt 2>&1 &
done
wait
cat $OUT/ramp-gpu*.txt
