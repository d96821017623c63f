#!/usr/bin/env bash
# The sha256 of every output the project writes, for showing that a restructuring changes no
# output byte: run it before and after the change with the same LABEL-free work folder, then
# compare the two lists (`diff before.sha256 after.sha256`).
#
#   scripts/output_digests.sh OUT.sha256 [--quick | --catalogue]
#
# Outputs covered, all written under one fixed folder (paths inside outputs must not differ):
#   pytest/   the whole test suite with --basetemp (every tmp_path a test writes, the fault
#             catalogue's logs and reports included)
#   taxi/     the taxi sample: ingest + verify, features under every profiles/*.yaml, the diff of
#             the first profile against each other one
#   big/      1M rows (bench/ingest.py's input): ingest, features under every profile, the diff
# --quick leaves out big/ and the suite; --catalogue leaves out big/ and runs, of the suite, the
# tests that write feature logs (jobs and loggers) and reports: the fault catalogue and its kin.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
list="$(realpath -m "$1")"; quick="${2:-}"
work=/tmp/skewtrace-outputs
rm -rf "$work"; mkdir -p "$work"
profiles=(profiles/*.yaml)
run_chain() {  # run_chain DIR CSV INGEST_FLAGS...
  local dir="$1" csv="$2"; shift 2
  skewtrace ingest --input "$csv" --output_dir "$dir/ingest" "$@" >/dev/null
  skewtrace verify "$dir/ingest" >/dev/null
  for p in "${profiles[@]}"; do
    skewtrace features --input_dir "$dir/ingest" --output_dir "$dir/$(basename "$p" .yaml)" \
      --transform_module transforms.taxi --profile "$p" >/dev/null
  done
  local first; first="$(basename "${profiles[0]}" .yaml)"
  for p in "${profiles[@]:1}"; do
    local name; name="$(basename "$p" .yaml)"
    skewtrace diff --offline "$dir/$first" --production "$dir/$name" \
      --output_dir "$dir/diff-$first-$name" >/dev/null || [ $? -eq 1 ]
  done
}
run_chain "$work/taxi" data/chicago_taxi/data.csv --schema data/chicago_taxi/schema.pbtxt \
  --num_shards 4
if [ "$quick" = "--catalogue" ]; then
  python -m pytest -q -p no:randomly --basetemp="$work/pytest" tests/test_faults.py \
    tests/test_diff.py tests/test_logger.py tests/test_logger_table.py tests/test_logger_values.py \
    tests/test_serve.py tests/test_aggregates.py tests/test_pii.py tests/test_transform_fn_dir.py \
    tests/test_check.py tests/test_rerun.py tests/test_ingest_sources.py >/dev/null
elif [ "$quick" != "--quick" ]; then
  python -c "import sys; sys.path.insert(0, 'bench'); import ingest; \
ingest.make_input(sys.argv[1], 1000000)" "$work/big.csv"
  run_chain "$work/big" "$work/big.csv" --schema data/chicago_taxi/schema.pbtxt \
    --key_columns trip_id
  rm "$work/big.csv"
  python -m pytest -q -p no:randomly --basetemp="$work/pytest" tests >/dev/null
fi
(cd "$work" && find . -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum) > "$list"
echo "$(wc -l < "$list") files -> $list"
