#!/usr/bin/env bash
# `make fuzz`: a bounded libFuzzer run over the request-head framing pass (fuzz/framing_fuzz.c,
# which feeds each input through the real libmicrohttpd to ss_read_head and the shim's URI
# callbacks), with AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   bash scripts/fuzz.sh            # 60 s
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh
#
# Seeds: fuzz/seeds (the cases of issue 16 and the smuggling cases before it). The corpus grows
# in .cache/fuzz/corpus; a finding (crash, sanitizer report, or a head the pass accepts that the
# harness's strict reading calls ambiguous) is written to .cache/fuzz/findings/ and the script
# exits non-zero. The last lines say how many inputs ran and how many findings there were.
set -euo pipefail

cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
clang=${CLANG:-}
if [ -z "$clang" ]; then
    for candidate in "$(dirname "$(command -v swift 2>/dev/null || echo /opt/swift/usr/bin/swift)")/clang" /opt/swift/usr/bin/clang clang; do
        if command -v "$candidate" >/dev/null 2>&1; then clang=$candidate; break; fi
    done
fi
[ -n "$clang" ] || { echo "fuzz: no clang found (the Swift toolchain's clang has libFuzzer)" >&2; exit 1; }

work=.cache/fuzz
mkdir -p "$work/corpus" "$work/findings"
binary=$work/framing_fuzz
cflags=$(pkg-config --cflags libmicrohttpd 2>/dev/null || true)
libs=$(pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
# shellcheck disable=SC2086
"$clang" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -ISources/CMicroHTTPDShim/include $cflags fuzz/framing_fuzz.c -o "$binary" $libs

log=$work/last-run.log
status=0
ASAN_OPTIONS=detect_leaks=0 "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/findings/" "$work/corpus" fuzz/seeds >"$log" 2>&1 || status=$?
tail -n 25 "$log"
runs=$(grep -oE 'Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' || true)
[ -n "$runs" ] || runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
findings=$(find "$work/findings" -type f -newer "$binary" | wc -l)
echo "fuzz: $runs inputs in ${seconds} s, $findings findings (corpus: $(find "$work/corpus" -type f | wc -l) inputs; log: $log)"
if [ "$status" -ne 0 ] || [ "$findings" -ne 0 ]; then
    echo "fuzz: FINDINGS in $work/findings:" >&2
    find "$work/findings" -type f -newer "$binary" >&2
    exit 1
fi
