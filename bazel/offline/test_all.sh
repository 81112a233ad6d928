#!/usr/bin/env bash
# Every Bazel check of the project, offline, in one command:
#   0. `bazel run //:gazelle`: brings the Go targets' srcs and deps in line with
#      the .go files (most changes to Go code don't touch BUILD files by hand),
#      and bazel/offline/update_lock.sh regenerates the pip lock when
#      tests/requirements.txt has a pin it lacks; with PGN_GAZELLE=check (the
#      default under CI, where a committed stale file must fail: a fresh
#      clone's `bazel test //...` would not build) both only report, as a
#      failure;
#   1. `bazel test //...` in this workspace: the Go tests (//go/...), the
#      Python suite (//tests/..., one py_test per file, grpcio clients), the
#      wheels (//bazel:wheel_test: the host's installs with grpcio from PyPI
#      into a clean venv and answers calls; //wheels/tests: every platform's
#      wheel inspected); building //... also builds the four release wheels,
#      //bench:compare and the Go bench tools;
#   2. `bazel test //...` in examples/bazel-consumer, a workspace that depends
#      on this module through local_path_override and serves a greeter with
#      pygrpc_native.server();
#   3. `bazel test //...` in the monorepo of examples/bazel-monorepo,
#      assembled under build/bazel-monorepo with a vendored copy of this
#      checkout in third_party/pygrpc-native, and run from the monorepo's root
#      by that copy's bazel/offline/bazel.sh, as a user of the copy would.
# A run fails when Bazel warns that use_repo() and a module extension
# disagree (MODULE.bazel's lists are out of step). Extra arguments go to every
# `bazel test` run. Ends with a "bazel: N passed, N failed" line (test
# targets); exit status non-zero if any failed. Under CI (CI set) the output
# bases of the three workspaces are deleted at the end (a CI clone's would
# otherwise stay behind, ~1-2 GB each; the shared caches keep the next clone
# fast); PGN_BAZEL_KEEP_OUTPUT=1 keeps them.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bazel=$here/bazel.sh
monorepo=$repo/build/bazel-monorepo
passed=0 failed=0 rc=0 changed=

# run_tests DIR RUNNER ARGS...: bazel test //... in DIR with the offline
# runner RUNNER, adds up the summary line.
run_tests() {
  local dir=$1 runner=$2 log t0=$SECONDS status
  shift 2
  log=$(mktemp)
  echo "== bazel test //... in ${dir#"$repo"/}"
  (cd "$dir" && bash "$runner" test //... "$@") 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  if grep -q 'reported incorrect imports of repositories via use_repo' "$log"; then
    echo "== ${dir#"$repo"/}: a use_repo() list is out of step with its extension (the warning above names the repositories): fix MODULE.bazel"
    status=1
  fi
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

gazelle_mode=${PGN_GAZELLE:-$([ -n "${CI:-}" ] && echo check || echo fix)}
if [ "$gazelle_mode" = check ]; then
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
  if [ "$gazelle_mode" = check ]; then
    echo "== run bazel/offline/update_lock.sh"
    failed=$((failed + 1)) rc=1
  else
    echo "== updating bazel/requirements_lock.txt (commit it)"
    bash "$here/update_lock.sh" || { failed=$((failed + 1)) rc=1; }
  fi
fi

run_tests "$repo" "$bazel" "$@"
run_tests "$repo/examples/bazel-consumer" "$bazel" "$@"
if bash "$repo/examples/bazel-monorepo/assemble.sh" "$monorepo"; then
  run_tests "$monorepo" "$monorepo/third_party/pygrpc-native/bazel/offline/bazel.sh" "$@"
else
  echo "== examples/bazel-monorepo/assemble.sh failed"
  failed=$((failed + 1)) rc=1
fi

if [ -n "${CI:-}" ]; then
  if [ "${PGN_BAZEL_KEEP_OUTPUT:-}" = 1 ]; then
    cleanup=shutdown
  else
    cleanup="clean --expunge"
  fi
  for dir in "$monorepo" "$repo/examples/bazel-consumer" "$repo"; do
    # shellcheck disable=SC2086 # cleanup is a command and its flag
    (cd "$dir" && bash "$bazel" $cleanup) >/dev/null 2>&1 || true
  done
fi
# Repeated here, where it is seen: the tests ran on BUILD files that differ
# from the committed ones.
[ -z "$changed" ] || printf '== gazelle updated these BUILD files (commit them):\n%s\n' "$changed"
echo "bazel: $passed passed, $failed failed"
exit $rc
