#!/usr/bin/env bash
# dara's test command (the one the README gives): installs what a fresh machine lacks, builds the
# workspace, then runs every unit and integration test against the real dara-trace/dara-replay
# binaries and the fixtures in tests/fixtures/.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cargo build --release --workspace
# Integration tests start many short-lived target processes; two test threads keep the 2-core
# machines responsive without serialising everything. --no-fail-fast: a failing test binary does
# not hide the results of the others; cargo still exits non-zero when any test failed.
status=0
cargo test --release --workspace --no-fail-fast -- --test-threads="${DARA_TEST_THREADS:-2}" || status=$?
# The loom model test of the slot handoff (docs/handoff.md), about ten seconds: `--cfg loom`
# changes every crate's flags, so it builds in a target directory of its own.
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" \
    cargo test --release -p dara-abi --test loom_handoff --target-dir target/loom || status=$?
exit "$status"
