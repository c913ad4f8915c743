#!/bin/sh
# Builds dist/tpu-watchdog_VERSION_all.deb from this checkout with plain dpkg-deb (no debhelper): the
# `watchdog` package into /usr/lib/tpu-watchdog (pure Python, for every python3 >= 3.10), a launcher
# /usr/bin/tpu-watchdog, the unit, the default config as a conffile, docs and a man page.
# Python dependencies are the distribution's python3-* packages (see control.in); nothing is fetched.
#
#   packaging/deb/build.sh [OUTDIR]        (default: dist/ of the checkout)
#
# Reproducible: owners root:root, normalised modes, every mtime SOURCE_DATE_EPOCH (default: the date of the
# newest entry of packaging/deb/changelog).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:-$REPO/dist}
PACKAGE=tpu-watchdog
MAINTAINER="TPU watchdog maintainers <tpu-watchdog@example.com>"

die() {
	echo "build.sh: $*" >&2
	exit 1
}

for tool in dpkg-deb gzip md5sum find sed; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not found (apt-get install dpkg gzip coreutils findutils sed)"
done

VERSION=$(sed -n 's/^__version__ = "\([^"]*\)"$/\1/p' "$REPO/watchdog/__init__.py")
[ -n "$VERSION" ] || die "no __version__ = \"...\" line in watchdog/__init__.py"
# The changelog's newest entry must be this version: a release adds an entry there.
CHANGELOG_VERSION=$(sed -n '1s/^[a-z0-9.+-]* (\([^)]*\)).*/\1/p' "$HERE/changelog")
[ "$CHANGELOG_VERSION" = "$VERSION" ] ||
	die "packaging/deb/changelog's newest entry is ${CHANGELOG_VERSION:-missing}, watchdog/__init__.py says $VERSION: add an entry for $VERSION"
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	CHANGELOG_DATE=$(sed -n 's/^ -- .*>  \(.*\)$/\1/p' "$HERE/changelog" | head -n 1)
	SOURCE_DATE_EPOCH=$(date -d "$CHANGELOG_DATE" +%s) || die "bad date in packaging/deb/changelog: $CHANGELOG_DATE"
fi
export SOURCE_DATE_EPOCH

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/tpu-watchdog-deb.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT INT TERM
ROOT=$STAGE/root
DOC=$ROOT/usr/share/doc/$PACKAGE

# The Python package: only the .py files (never a __pycache__ or an editable install's leftovers).
(cd "$REPO" && find watchdog -type f -name '*.py') | sort | while read -r file; do
	install -D -m 0644 "$REPO/$file" "$ROOT/usr/lib/$PACKAGE/$file"
done
[ -f "$ROOT/usr/lib/$PACKAGE/watchdog/cli.py" ] || die "no watchdog/cli.py under $REPO"

install -D -m 0755 "$HERE/tpu-watchdog" "$ROOT/usr/bin/tpu-watchdog"
# /lib, not /usr/lib: where deb-systemd-helper and Debian 12 / Ubuntu 22.04 packages put units.
install -D -m 0644 "$REPO/systemd/tpu-watchdog.service" "$ROOT/lib/systemd/system/tpu-watchdog.service"
install -D -m 0644 "$REPO/examples/config.toml" "$ROOT/etc/$PACKAGE/config.toml"
install -D -m 0644 "$HERE/copyright" "$DOC/copyright"
install -D -m 0644 "$HERE/changelog" "$DOC/changelog"
gzip -9 -n "$DOC/changelog"
install -D -m 0644 "$REPO/README.md" "$DOC/README.md"
gzip -9 -n "$DOC/README.md"
# The reference pages the README links to (docs/NAME.md), beside it: `zless docs/NAME.md.gz` on the host.
for page in "$REPO"/docs/*.md; do
	install -D -m 0644 "$page" "$DOC/docs/$(basename "$page")"
	gzip -9 -n "$DOC/docs/$(basename "$page")"
done
install -D -m 0644 "$HERE/tpu-watchdog.1" "$ROOT/usr/share/man/man1/tpu-watchdog.1"
gzip -9 -n "$ROOT/usr/share/man/man1/tpu-watchdog.1"

mkdir -p "$ROOT/DEBIAN"
for script in postinst prerm postrm; do
	install -m 0755 "$HERE/$script" "$ROOT/DEBIAN/$script"
done
echo "/etc/$PACKAGE/config.toml" >"$ROOT/DEBIAN/conffiles"
chmod 0644 "$ROOT/DEBIAN/conffiles"
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) \
	>"$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/md5sums"
# Installed-Size as dpkg-gencontrol counts it: KiB per file, rounded up, plus one per directory.
INSTALLED_SIZE=$(cd "$ROOT" && find . -path ./DEBIAN -prune -o \( -type f -printf '%s\n' \) -o \( -type d -printf '1024\n' \) |
	awk '{ kib += int(($1 + 1023) / 1024) } END { print kib }')
sed -e "s/@VERSION@/$VERSION/" -e "s/@INSTALLED_SIZE@/$INSTALLED_SIZE/" -e "s/@MAINTAINER@/$MAINTAINER/" \
	"$HERE/control.in" >"$ROOT/DEBIAN/control"
chmod 0644 "$ROOT/DEBIAN/control"

find "$ROOT" -type d -exec chmod 0755 {} +
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$OUT"
DEB=$OUT/${PACKAGE}_${VERSION}_all.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
