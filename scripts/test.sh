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
cargo test --release --workspace --no-fail-fast -- --test-threads="${DARA_TEST_THREADS:-2}"
