#!/usr/bin/env bash
# `make fuzz`: bounded libFuzzer runs, one per target, each for FUZZ_SECONDS (default 60):
#
#   framing    the request-head framing pass (fuzz/framing_fuzz.c: each input through the real
#              libmicrohttpd to ss_read_head and the shim's URI callbacks), C, with
#              AddressSanitizer and UndefinedBehaviorSanitizer
#   json       StateJSON's parser and writers: what parses writes canonical JSON that parses
#              back to the same value (fuzz/Sources/FuzzJSON)
#   features   the example features' actions and states through the stores' JSON entry points
#              (dispatch, snapshot load, rehydrate, import, replay); every state saved loads back
#   patch      JSON Patch: diff(a, b) applied to a gives b; any patch applies whole or not at all
#   recording  recordings read, replayed and imported as `state-server replay` and
#              `POST /v1/recordings` do
#
# The Swift targets are a package of their own (fuzz/Package.swift), built here with
# `-sanitize=fuzzer,address` into .build-fuzz (release: overflow, bounds and precondition traps
# stay on), so `swift build` and `make test` never build them.
#
#   bash scripts/fuzz.sh                         # every target, 60 s each
#   FUZZ_SECONDS=600 FUZZ_TARGETS="json patch" bash scripts/fuzz.sh
#
# Seeds: fuzz/seeds/<target>/ (the contract's examples, Tests/Recordings, earlier findings). Each
# target's corpus grows in .cache/fuzz/<target>/corpus. A finding (a crash, a trap, a sanitizer
# report, a broken oracle, an input over 10 s or 2 GiB) is written to .cache/fuzz/<target>/findings/
# and the script exits non-zero. The last lines give, per target, the inputs run, the time and
# the findings.
set -euo pipefail

cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-framing json features patch recording}
work=.cache/fuzz
mkdir -p "$work"

swift_bin=$(command -v swift 2>/dev/null || echo /opt/swift/usr/bin/swift)
clang=${CLANG:-}
if [ -z "$clang" ]; then
    for candidate in "$(dirname "$swift_bin")/clang" /opt/swift/usr/bin/clang clang; do
        if command -v "$candidate" >/dev/null 2>&1; then clang=$candidate; break; fi
    done
fi

# The executable and the seeds of each target.
declare -A binaries=(
    [framing]=$work/framing_fuzz
    [json]=.build-fuzz/release/FuzzJSON
    [features]=.build-fuzz/release/FuzzFeatures
    [patch]=.build-fuzz/release/FuzzPatch
    [recording]=.build-fuzz/release/FuzzRecording
)
swift_targets=()
for target in $targets; do
    [ -n "${binaries[$target]:-}" ] || { echo "fuzz: no target '$target' (framing json features patch recording)" >&2; exit 2; }
    [ "$target" = framing ] || swift_targets+=("$target")
done

if [[ " $targets " == *" framing "* ]]; then
    [ -n "$clang" ] || { echo "fuzz: no clang found (the Swift toolchain's clang has libFuzzer)" >&2; exit 1; }
    # GnuTLS too: the shim checks TLS certificates and keys with it.
    cflags=$(pkg-config --cflags libmicrohttpd gnutls 2>/dev/null || true)
    libs=$(pkg-config --libs libmicrohttpd gnutls 2>/dev/null || echo -lmicrohttpd -lgnutls)
    echo "fuzz: building framing (clang, libFuzzer, ASan, UBSan)"
    # shellcheck disable=SC2086
    "$clang" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -ISources/CMicroHTTPDShim/include $cflags fuzz/framing_fuzz.c -o "${binaries[framing]}" $libs
fi
if [ ${#swift_targets[@]} -gt 0 ]; then
    echo "fuzz: building the Swift targets (swift build --package-path fuzz, libFuzzer, ASan; log: $work/swift-build.log)"
    # The environment of PATH and HOME only, as the Makefile's release build: SwiftPM re-plans
    # when the environment its manifests see changes.
    if ! env -i PATH="$PATH" HOME="$HOME" "$swift_bin" build --package-path fuzz --scratch-path .build-fuzz -c release \
        -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library >"$work/swift-build.log" 2>&1; then
        tail -n 40 "$work/swift-build.log" >&2
        echo "fuzz: the Swift targets do not build" >&2
        exit 1
    fi
fi

summary=()
failed=0
for target in $targets; do
    dir=$work/$target
    mkdir -p "$dir/corpus" "$dir/findings"
    stamp=$dir/.started
    touch "$stamp"
    log=$dir/last-run.log
    options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$dir/findings/")
    [ "$target" = framing ] || options+=(-dict=fuzz/json.dict)
    echo "fuzz: $target for ${seconds} s"
    status=0
    started=$(date +%s)
    # SWIFT_BACKTRACE off: the Swift runtime's crash handler reads memory AddressSanitizer
    # guards and reports itself; libFuzzer's handler prints the trap's stack instead.
    ASAN_OPTIONS=detect_leaks=0 SWIFT_BACKTRACE=enable=no "${binaries[$target]}" "${options[@]}" \
        "$dir/corpus" "fuzz/seeds/$target" >"$log" 2>&1 || status=$?
    elapsed=$(($(date +%s) - started))
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
    [ -n "$runs" ] || runs=$(grep -oE 'Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' || echo "?")
    findings=$(find "$dir/findings" -type f -newer "$stamp" | wc -l)
    if [ "$status" -ne 0 ] || [ "$findings" -ne 0 ]; then
        failed=1
        tail -n 40 "$log"
        echo "fuzz: $target: FINDINGS (exit $status) in $dir/findings:" >&2
        find "$dir/findings" -type f -newer "$stamp" >&2
    fi
    summary+=("$(printf '%-10s %10s inputs in %4s s, %s findings (corpus: %s inputs; log: %s)' \
        "$target" "$runs" "$elapsed" "$findings" "$(find "$dir/corpus" -type f | wc -l)" "$log")")
done
for line in "${summary[@]}"; do echo "fuzz: $line"; done
exit "$failed"
