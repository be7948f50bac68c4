#!/usr/bin/env bash
# Fuzzes every file reader: builds the libFuzzer targets of fuzz/ with clang, ASan and UBSan
# into build-fuzz/ and runs each for SECONDS (default 30) from its committed corpus
# fuzz/corpus/<target>/. A crash, a sanitizer report or an unexpected exception fails the
# script; libFuzzer saves the input as fuzz/corpus/<target>/crash-* — fix the reader and commit
# that file, so the corpus replays it forever. New interesting inputs go to a temporary folder
# (the committed corpus stays small). `bash scripts/fuzz.sh --seeds` rewrites the seed inputs.
# Used by scripts/test.sh (CI) with FT_FUZZ_SECONDS (default 30) per target.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ >/dev/null || ! echo 'int main(){}' | clang++ -x c++ -fsanitize=fuzzer - -o /tmp/ft_fuzz_probe 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang >/dev/null
fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFITTRAIN_CUDA=OFF -DFITTRAIN_TESTS=OFF -DFITTRAIN_FUZZ=ON >/dev/null
TARGETS=(token_shard checkpoint model_config parquet npz)
if [ "${1:-}" = "--seeds" ]; then
  cmake --build build-fuzz -j"$(nproc)" --target make_fuzz_seeds
  ./build-fuzz/make_fuzz_seeds fuzz/corpus
  exit 0
fi
SECS=${1:-${FT_FUZZ_SECONDS:-30}}
cmake --build build-fuzz -j"$(nproc)" --target "${TARGETS[@]/%/_fuzz}"
for t in "${TARGETS[@]}"; do
  work=$(mktemp -d)
  echo "== fuzz $t for ${SECS}s"
  # -rss_limit_mb bounds a reader that would allocate by a size field it did not check
  set +e
  ./build-fuzz/${t}_fuzz -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="fuzz/corpus/$t/" "$work" "fuzz/corpus/$t" >"$work.log" 2>&1
  status=$?
  set -e
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)|crash|Test unit written" "$work.log" || true
  rm -f "$work.log"
  rm -rf "$work"
  [ "$status" -eq 0 ] || { echo "fuzz $t FAILED (see the crash-* input under fuzz/corpus/$t/)"; exit 1; }
done
echo "fuzz: every target ran ${SECS}s without a finding"
