# shellcheck shell=bash
# Shared by the scripts in tests/netns that run ferroce's libibverbs.so.1 (sourced, not run).
# Sets `root` (the repository) and F: the ferroce binary given as the script's first
# argument, else target/release/ferroce, built with the library beside it when either is
# missing.
#   . "$(dirname "$0")/lib.sh" "$@"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ $# = 0 ]; then
  F=${CARGO_TARGET_DIR:-$root/target}/release/ferroce
  if [ ! -x "$F" ] || [ ! -f "$(dirname "$F")/libibverbs.so" ]; then
    (cd "$root" && cargo build --release --quiet -p ferroce-cli --bin ferroce -p ferroce-ibverbs --lib)
  fi
else
  F=$1
fi
