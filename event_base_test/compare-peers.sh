#!/usr/bin/env bash
# Runs event_base beside the peer programs of ../shared/peers (ruststream 0.7's MemoryBroker and
# a bare flume channel) on the same workload, interleaved in one run, and prints the ratios:
#
#   event_base_test/compare-peers.sh [extra throughput args, e.g. --quick]
#   event_base_test/compare-peers.sh --all [extra args]   # every scenario, peers included:
#                                                         # each target of issue 14 in one run
#
# (`--all` includes the backlog scenarios: 1 M and 10 M pending records unless
# EB_BACKLOG_SIZES=1000000 or so says otherwise.)
#
# The peers are not part of the workspace: they are copied out of $PEERS_DIR (default
# ../shared/peers beside the repository; it may be read-only) and built in target/peers with
# their own lock files. Needs the registry (crates.io) the first time.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
peers_src="${PEERS_DIR:-$repo/../shared/peers}"
target="${CARGO_TARGET_DIR:-$repo/target}"
work="$target/peers"
mkdir -p "$work/bin"
for peer in flume_bench ruststream_bench; do
    if [ ! -f "$peers_src/$peer/Cargo.toml" ]; then
        echo "compare-peers: no $peer in $peers_src (set PEERS_DIR to the peers folder)" >&2
        exit 1
    fi
    rm -rf "$work/$peer"
    cp -r "$peers_src/$peer" "$work/$peer"
    (cd "$work/$peer" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet)
    cp "$work/target/release/$peer" "$work/bin/$peer"
done
cd "$repo"
cargo build --release --quiet -p event_base_test --bin throughput
if [ "${1:-}" = "--all" ]; then
    shift
    exec "$target/release/throughput" --peers "$work/bin" "$@"
fi
exec "$target/release/throughput" --only peers --peers "$work/bin" "$@"
