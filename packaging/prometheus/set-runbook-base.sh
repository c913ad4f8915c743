#!/bin/sh
# Prints tpu-watchdog.rules.yml with every alert's runbook_url under BASE instead of the shipped placeholder
# (https://tpu-watchdog.invalid/docs/runbooks.md, which never resolves): BASE is where your site publishes
# docs/runbooks.md, whose headings (one per alert) are the #alertname anchors.
#
#   packaging/prometheus/set-runbook-base.sh BASE [RULES] > /etc/prometheus/rules/tpu-watchdog.rules.yml
set -eu

PLACEHOLDER=https://tpu-watchdog.invalid/docs/runbooks.md
die() { printf "set-runbook-base: %s\n" "$*" >&2; exit 2; }

[ "$#" -ge 1 ] && [ "$#" -le 2 ] || die "usage: set-runbook-base.sh BASE [RULES]  (BASE: an absolute http(s) URL)"
BASE=$1
RULES=${2:-$(dirname "$0")/tpu-watchdog.rules.yml}
case "$BASE" in
    http://?*|https://?*) ;;
    *) die "BASE must be an absolute http:// or https:// URL, like https://git.example.com/tpu-watchdog/docs/runbooks.md; got '$BASE'" ;;
esac
case "$BASE" in
    *[!A-Za-z0-9._~:/?@+,=%-]*)
        die "BASE may hold only letters, digits and ._~:/?@+,=%- (no #fragment, quote, space, & or |: percent-encode them); got '$BASE'" ;;
esac
[ -r "$RULES" ] || die "cannot read $RULES"
grep -q "$PLACEHOLDER#" "$RULES" || die "$RULES has no runbook_url under $PLACEHOLDER (already rewritten?)"
sed "s|$PLACEHOLDER#|${BASE%/}#|g" "$RULES"
