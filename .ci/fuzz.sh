#!/usr/bin/env bash
# Run every cargo-fuzz target in fuzz/ for a bounded time, starting from the committed
# corpus in fuzz/corpus/<target>/. Exits non-zero on the first crash (libFuzzer prints
# the input and cargo-fuzz saves it under fuzz/artifacts/<target>/; turn it into a
# regression test and commit it to the corpus).
#
#   FUZZ_SECONDS   seconds per target (default 40; 9 targets take 6 minutes)
#
# The fuzz crate is outside the workspace. libfuzzer-sys needs nightly features: a stable
# toolchain with RUSTC_BOOTSTRAP=1 is enough. The sanitizer is off (safe Rust: the
# targets' assertions and overflow checks are what we fuzz for), debug assertions on.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-40}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

targets=$(cargo fuzz list --fuzz-dir fuzz)
flags=(--fuzz-dir fuzz --sanitizer none --debug-assertions)
cargo fuzz build "${flags[@]}"
for target in $targets; do
    # Work on a scratch copy so that a CI run never rewrites the committed corpus.
    scratch=$(mktemp -d)
    log=$(mktemp)
    cp -r "fuzz/corpus/$target/." "$scratch/"
    echo "fuzz.sh: $target for ${seconds}s ($(ls "$scratch" | wc -l) corpus files)"
    if cargo fuzz run "${flags[@]}" "$target" "$scratch" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" || true
    else
        tail -n 60 "$log"
        echo "fuzz.sh: $target crashed; the input is under fuzz/artifacts/$target/"
        exit 1
    fi
    rm -rf "$scratch" "$log"
done
echo "fuzz.sh: all targets ran ${seconds}s each without a crash"
