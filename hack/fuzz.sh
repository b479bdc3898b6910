#!/usr/bin/env bash
# Runs each cargo-fuzz target of fuzz/ for FUZZ_SECONDS (default 600) and prints one line per target:
# how many inputs libFuzzer executed and how many crashes it saved. New inputs go to
# fuzz/corpus/<target>, read together with the committed seeds of fuzz/seeds/<target>; crashes go to
# fuzz/artifacts/<target>/ (replay one with `cargo +nightly fuzz run <target> <file>`), the libFuzzer
# output to fuzz/artifacts/<target>.log. FUZZ_TARGETS picks targets (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
seconds=${FUZZ_SECONDS:-600}
read -r -a targets <<<"${FUZZ_TARGETS:-render validate conversion webhook_review variables ignition_merge}"

command -v cargo-fuzz >/dev/null || "$CARGO" install cargo-fuzz --locked
"$CARGO" +nightly fuzz build

count_crashes() {
    find "fuzz/artifacts/$1" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) 2>/dev/null | wc -l || true
}

results=()
status=0
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    # Beside, not inside, the artifact directory: cargo-fuzz reports its newest file as the crash.
    log="fuzz/artifacts/$target.log"
    before=$(count_crashes "$target")
    echo "fuzzing $target for ${seconds}s (log: $log)"
    "$CARGO" +nightly fuzz run "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=1
    # The final stats; a run stopped by a crash may only have libFuzzer's last `#N` status line.
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [[ -n $executions ]] || executions=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
    crashes=$(($(count_crashes "$target") - before))
    results+=("$target|${executions:-?}|$crashes")
done

printf '\n%-16s | %12s | %s\n' target executions crashes
printf '%-16s-+-%12s-+-%s\n' ---------------- ------------ -------
for row in "${results[@]}"; do
    IFS='|' read -r target executions crashes <<<"$row"
    printf '%-16s | %12s | %s\n' "$target" "$executions" "$crashes"
done
exit $status
