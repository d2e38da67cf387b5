#!/usr/bin/env bash
# Puts dara's commands on your PATH: builds the workspace (release) and links dara-trace,
# dara-replay and dara from target/release into BINDIR (default ~/.local/bin). Links, not copies:
# each tool finds libdara_preload.so and its sibling tools beside its real path, and a rebuild is
# picked up without installing again.
#   scripts/install.sh [--no-build] [BINDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
if [[ "${1:-}" == "--no-build" ]]; then
    build=0
    shift
fi
bindir="${1:-$HOME/.local/bin}"
if [[ $build == 1 ]]; then
    cargo build --release --workspace
fi
mkdir -p "$bindir"
for tool in dara-trace dara-replay dara; do
    if [[ ! -x "target/release/$tool" ]]; then
        echo "install.sh: target/release/$tool is missing; run without --no-build" >&2
        exit 2
    fi
    ln -sfn "$PWD/target/release/$tool" "$bindir/$tool"
done
echo "linked dara-trace, dara-replay and dara into $bindir"
case ":$PATH:" in
    *":$bindir:"*) ;;
    *) echo "note: $bindir is not on your PATH; add it (export PATH=\"$bindir:\$PATH\")" ;;
esac
