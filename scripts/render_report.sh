#!/usr/bin/env bash
# Render a kgen HTML report to a PNG in headless Chromium (Debian's `chromium` package), to look at it.
#   scripts/render_report.sh report.html [out.png] [WIDTHxHEIGHT]
# Exits 77 (skip) when no chromium is installed: nothing in CI depends on this.
set -euo pipefail
html="${1:?usage: render_report.sh REPORT.html [OUT.png] [WIDTHxHEIGHT]}"
png="${2:-${html%.html}.png}"
size="${3:-1400x2400}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [[ -z "$browser" ]]; then
    echo "render_report.sh: no chromium found (apt-get install -y chromium); skipping" >&2
    exit 77
fi
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$(realpath -m "$png")" --window-size="${size/x/,}" "file://$(realpath "$html")" >/dev/null 2>&1
[[ -s "$png" ]] || { echo "render_report.sh: chromium wrote no $png" >&2; exit 1; }
echo "$png"
