# Shared preamble of the fixture benchmarks; source it after `cd` to the repository root with
# `bench_kind` set (tsan, sancov): builds the tools and sets `lib` (dara's link-time libraries),
# `bin` (target/bench-bin/$bench_kind, where fixture builds go) and `out` (a scratch directory
# removed on exit).
cargo build --release --workspace -q
lib="$PWD/target/release"
bin="target/bench-bin/$bench_kind"
mkdir -p "$bin"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
