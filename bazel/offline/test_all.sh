#!/usr/bin/env bash
# Every Bazel check of the project, offline, in one command:
#   0. `bazel run //:gazelle`: brings the Go targets' srcs and deps in line with
#      the .go files (most changes to Go code don't touch BUILD files by hand),
#      and bazel/offline/update_lock.sh regenerates the pip lock when
#      tests/requirements.txt has a pin it lacks; with PGN_GAZELLE=check both
#      only report, as a failure;
#   1. `bazel test //...` in this workspace: the Go tests (//go/...), the
#      Python suite (//tests/..., one py_test per file, grpcio clients), the
#      wheel (//bazel:wheel_test: //:wheel installs with pip and imports);
#      building //... also builds //bench:compare and the Go bench tools;
#   2. `bazel test //...` in examples/bazel-consumer, a workspace that depends
#      on this module and serves a greeter with pygrpc_native.server().
# Extra arguments go to both `bazel test` runs. Ends with a
# "bazel: N passed, N failed" line (test targets); exit status non-zero if any
# failed. Under CI (CI set), the Bazel servers are stopped at the end.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bazel=$here/bazel.sh
passed=0 failed=0 rc=0

# run_tests DIR ARGS...: bazel test //... in DIR, adds up the summary line.
run_tests() {
  local dir=$1 log t0=$SECONDS status
  shift
  log=$(mktemp)
  echo "== bazel test //... in ${dir#"$repo"/}"
  (cd "$dir" && bash "$bazel" test //... "$@") 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  # "Executed 3 out of 19 tests: 17 tests pass and 2 fail locally."
  local line p f
  line=$(grep -E '^Executed [0-9]+ out of [0-9]+ tests?:' "$log" | tail -1)
  p=$(grep -oE '[0-9]+ tests? pass' <<<"$line" | grep -oE '^[0-9]+' || true)
  f=$(grep -oE '[0-9]+ (tests? )?fails?' <<<"$line" | grep -oE '^[0-9]+' || true)
  passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0}))
  if [ "$status" -ne 0 ]; then
    rc=1
    [ -n "$f" ] || failed=$((failed + 1))  # failed before any test ran
  fi
  echo "== ${dir#"$repo"/}: exit $status, $((SECONDS - t0)) s"
  rm -f "$log"
}

if [ "${PGN_GAZELLE:-fix}" = check ]; then
  echo "== gazelle (check)"
  if ! (cd "$repo" && bash "$bazel" run //:gazelle -- -mode=diff); then
    echo "== BUILD files are stale: run bazel/offline/bazel.sh run //:gazelle"
    failed=$((failed + 1)) rc=1
  fi
else
  echo "== gazelle"
  build_files() { (cd "$repo" && find go bench -name BUILD.bazel -exec sha256sum {} + | sort); }
  before=$(build_files)
  (cd "$repo" && bash "$bazel" run //:gazelle) || { failed=$((failed + 1)) rc=1; }
  changed=$(diff <(echo "$before") <(build_files) | sed -n 's/^> [0-9a-f]*  /  /p' || true)
  [ -z "$changed" ] || printf '== gazelle updated these BUILD files (commit them):\n%s\n' "$changed"
fi

# The pip lock: regenerated when tests/requirements.txt has a pin it lacks.
if ! bash "$here/update_lock.sh" --check; then
  if [ "${PGN_GAZELLE:-fix}" = check ]; then
    echo "== run bazel/offline/update_lock.sh"
    failed=$((failed + 1)) rc=1
  else
    echo "== updating bazel/requirements_lock.txt (commit it)"
    bash "$here/update_lock.sh" || { failed=$((failed + 1)) rc=1; }
  fi
fi

run_tests "$repo" "$@"
run_tests "$repo/examples/bazel-consumer" "$@"

if [ -n "${CI:-}" ]; then
  (cd "$repo/examples/bazel-consumer" && bash "$bazel" shutdown) >/dev/null 2>&1 || true
  (cd "$repo" && bash "$bazel" shutdown) >/dev/null 2>&1 || true
fi
echo "bazel: $passed passed, $failed failed"
exit $rc
