# The preamble every project script sources: strict mode, the repository root as the
# working directory, the cache outside the checkout (OUTBOX_RELAY_CACHE, default
# ~/.cache/outbox-relay) and cargo's target dir in it, one per compiler version so a
# toolchain change never mixes artefacts. log/die prefix messages with the script name.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE=${OUTBOX_RELAY_CACHE:-$HOME/.cache/outbox-relay}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target-rustc-$(rustc --version | cut -d' ' -f2)}
SCRIPT_NAME=$(basename "$0")

log() { printf '%s: %s\n' "$SCRIPT_NAME" "$*" >&2; }
die() { printf '%s: error: %s\n' "$SCRIPT_NAME" "$*" >&2; exit 1; }
