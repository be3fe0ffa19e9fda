#!/usr/bin/env bash
# Runs every test of the workspace: `cargo test --workspace`, after making sure the servers the
# tests start for themselves are installed.
#
# Some tests start real servers on free loopback ports and stop them afterwards; they need the
# programs, not a running service:
#
#   program        Debian/Ubuntu package   used by
#   redis-server   redis-server            event_base_redis and the Redis tests of event_base_test
#   pg_ctlcluster  postgresql              the PostgreSQL tests of event_base_test (they run initdb and
#                                          postgres from /usr/lib/postgresql/<version>/bin, which are
#                                          not on PATH; pg_ctlcluster, of the same install, is)
#   promtool       prometheus              event_base_grpc's metrics_endpoint test (checks /metrics)
#   chromium       chromium                event_base_grpc's dashboard_browser test (a headless browser)
#   chromedriver   chromium-driver         event_base_grpc's dashboard_browser test (drives it, WebDriver)
#
# (The full-disk tests of the WAL mount a small tmpfs: they need root, as CI has; set
# EB_TEST_NO_MOUNT=1 to skip them elsewhere.)
#
# A missing program is installed with apt-get when this script runs as root; otherwise the script
# names the packages to install and exits with status 1 before building anything. Arguments are
# passed on to cargo test (`./test.sh --no-fail-fast`, `./test.sh -- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")"

# program:package, one per program the tests start.
servers=("redis-server:redis-server" "pg_ctlcluster:postgresql" "promtool:prometheus" "chromium:chromium" "chromedriver:chromium-driver")

missing_packages=()
for entry in "${servers[@]}"; do
    program=${entry%%:*}
    package=${entry#*:}
    if ! command -v "$program" >/dev/null 2>&1; then
        missing_packages+=("$package")
    fi
done

if ((${#missing_packages[@]} > 0)); then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "test.sh: installing ${missing_packages[*]} (the tests start these servers)"
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing_packages[@]}"
    else
        echo "test.sh: the tests start servers that are not installed: ${missing_packages[*]}" >&2
        echo "test.sh: install them first, e.g. sudo apt-get install -y ${missing_packages[*]}" >&2
        echo "test.sh: (or run this script as root on Debian/Ubuntu and it installs them)" >&2
        exit 1
    fi
fi

exec cargo test --workspace "$@"
