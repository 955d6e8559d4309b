#!/usr/bin/env bash
# Runs the module's Go fuzz targets one at a time, each for FUZZTIME.
#
#   scripts/fuzz.sh                      every target
#   scripts/fuzz.sh PATTERN...           targets whose "package:FuzzName"
#                                        matches any extended regex, e.g.
#                                        'schemas/dpop:' or ':FuzzParse$'
#   scripts/fuzz.sh -l [PATTERN...]      list the targets and exit
#
# Environment:
#   FUZZTIME      time per target, as go test -fuzztime takes it (10m; "30s",
#                 or "5000x" for a number of executions)
#   FUZZPARALLEL  fuzzing workers per target (1): one core; the machine's
#                 others stay free
#   FUZZMINIMIZETIME  how long go test may minimize each new interesting
#                 input (go test's own default, 60s, when unset); large inputs
#                 such as OpenAPI documents minimize slowly
#   FUZZLOGDIR    where each target's full go test output goes (a new
#                 directory under ${TMPDIR:-/tmp})
#
# Targets are found in the *_test.go files of this module (nested modules,
# vendor and testdata are left out), so a new target is fuzzed without
# editing this script. For each target it prints the executions, the new
# interesting inputs and any failure. A crash leaves its input where go test
# wrote it, <package>/testdata/fuzz/<FuzzName>/<hash>, which plain `go test`
# then replays; the remaining targets still run, and the script exits 1.
# A table sums up the run at the end.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

fuzztime=${FUZZTIME:-10m}
parallel=${FUZZPARALLEL:-1}
minimize=()
[ -z "${FUZZMINIMIZETIME:-}" ] || minimize=(-fuzzminimizetime "$FUZZMINIMIZETIME")
list_only=0
if [ "${1:-}" = "-l" ]; then
  list_only=1
  shift
fi

# discover prints "./pkg FuzzName" for every fuzz target of the module.
discover() {
  local nested=()
  while IFS= read -r mod; do
    [ "$mod" = "./go.mod" ] || nested+=(-not -path "$(dirname "$mod")/*")
  done < <(find . -name go.mod -not -path './.git/*' -not -path '*/vendor/*')
  find . -name '*_test.go' -not -path './.git/*' -not -path '*/vendor/*' -not -path '*/testdata/*' \
    ${nested[@]+"${nested[@]}"} -print0 |
    xargs -0 grep -H -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' |
    sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' |
    sort -u
}

targets=()
while read -r pkg name; do
  if [ $# -gt 0 ]; then
    keep=0
    for pat in "$@"; do
      if [[ "$pkg:$name" =~ $pat ]]; then
        keep=1
        break
      fi
    done
    [ "$keep" = 1 ] || continue
  fi
  targets+=("$pkg $name")
done < <(discover)

if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz target matches ${*:-(no pattern)}" >&2
  exit 2
fi
if [ "$list_only" = 1 ]; then
  printf '%s\n' "${targets[@]}"
  exit 0
fi

logdir=${FUZZLOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/chio-fuzz.XXXXXX")}
mkdir -p "$logdir"
echo "fuzz: ${#targets[@]} targets, ${fuzztime} each, ${parallel} worker(s); logs in ${logdir}"

rows=()
failed=0
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  log="$logdir/$(echo "${pkg#./}" | tr / _)_${name}.log"
  echo "fuzz: === ${pkg} ${name} (started $(date -u +%H:%M:%S) UTC)"
  start=$(date +%s)
  for attempt in 1 2; do
    rc=0
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel "$parallel" ${minimize[@]+"${minimize[@]}"} "$pkg" >"$log" 2>&1 || rc=$?
    # go test's fuzzer can fail with a bare "context deadline exceeded"
    # and no failing input when -fuzztime ends while a busy machine keeps
    # a worker from stopping: that is no finding, so the target runs once
    # more; a second time counts as a failure.
    if [ "$rc" -ne 0 ] && ! grep -q 'Failing input written' "$log" &&
      grep -A1 -- "--- FAIL: ${name} " "$log" | grep -q 'context deadline exceeded'; then
      [ "$attempt" = 1 ] && echo "fuzz:     the fuzzer stopped on its deadline with no finding; running it again"
      continue
    fi
    break
  done
  secs=$(($(date +%s) - start))

  # The last progress line carries the totals:
  # "fuzz: elapsed: 10m0s, execs: 123 (205/sec), new interesting: 4 (total: 40)"
  last=$(grep -E '^fuzz: elapsed: .*execs: [0-9]+' "$log" | tail -n 1 || true)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  newint=$(sed -nE 's/.*new interesting: ([0-9]+) \(total: ([0-9]+)\).*/\1 (corpus \2)/p' <<<"$last")
  input=$(sed -nE 's/.*Failing input written to (.*)$/\1/p' "$log" | tail -n 1)

  result=ok
  if [ "$rc" -ne 0 ]; then
    failed=1
    if [ -n "$input" ]; then
      result=CRASH
    else
      result=FAIL # build error, a failing seed, or the fuzzer itself
    fi
  fi
  echo "fuzz:     ${secs}s, execs ${execs:-?}, new interesting ${newint:-?}, ${result}"
  if [ "$result" != ok ]; then
    # The failure itself: go test's report up to the stack's first frames.
    grep -E -A 25 -- '--- FAIL|panic:|Failing input|cannot|undefined' "$log" | head -n 60 | sed 's/^/fuzz:     | /'
    [ -z "$input" ] || echo "fuzz:     input kept at ${pkg}/${input}; replay: go test -run '^${name}\$' ${pkg}"
    echo "fuzz:     full output: ${log}"
  fi
  rows+=("${name}|${pkg}|${secs}s|${execs:-?}|${result}${input:+ ${pkg#./}/${input}}")
done

echo
echo "fuzz: summary (${fuzztime} per target, ${parallel} worker(s))"
{
  echo "TARGET|PACKAGE|TIME|EXECS|CRASH?"
  printf '%s\n' "${rows[@]}"
} | column -t -s '|'
exit "$failed"
