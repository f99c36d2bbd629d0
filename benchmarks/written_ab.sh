#!/usr/bin/env bash
# What the commands write, from the code in .gpu/old (a `git archive` of the commit to compare against) and
# from this tree, on this node: the profile `init` writes for it, for one node and for NODES nodes (default
# 2), with what it prints; the report of EVIDENCE (Markdown and each plot's PNG; default: the 2x H200
# reference run in tests/data), its CSV export, and `compare` of BASELINE against it. Then a diff of the two
# sides' files, which must be the same bytes: exit 1 on a difference (diff.txt says which).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
here=$PWD
EVIDENCE=$here/${EVIDENCE:-tests/data/evidence/h200-x2}
BASELINE=$here/${BASELINE:-tests/data/evidence/h200-x2-zero3fix}
NODES=${NODES:-2}
nvidia-smi -L
for v in old new; do
  if [ "$v" = old ]; then tree=$here/.gpu/old; else tree=$here; fi
  mkdir -p "$OUT/$v" && cd "$OUT/$v" || exit 1
  ca() { PYTHONPATH=$tree:/tmp/site python3 -m acceptance.cli "$@"; }
  ca init --name ab-one -o ab-one.yaml > init-one.txt 2>&1; echo "rc=$?" >> init-one.txt
  ca init --name ab-many --nodes "$NODES" -o ab-many.yaml > init-many.txt 2>&1; echo "rc=$?" >> init-many.txt
  mkdir -p report && ca report "$EVIDENCE" -o report/report.html > report.txt 2>&1; echo "rc=$?" >> report.txt
  ca export "$EVIDENCE" -o export.csv > export.txt 2>&1; echo "rc=$?" >> export.txt
  ca compare "$BASELINE" "$EVIDENCE" > compare.txt 2>&1; echo "rc=$?" >> compare.txt
  echo "== $v: $(printf '%s ' *)"
done
cd "$OUT" || exit 1
diff -r old new > diff.txt; same=$?
echo "same bytes: $([ $same = 0 ] && echo yes || echo no) ($(wc -l < diff.txt) lines of diff.txt)"
head -40 diff.txt
exit $same
