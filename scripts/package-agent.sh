#!/usr/bin/env bash
# `npm run package:agent`: builds the terminal's Debian package, locker-agent_<version>_<arch>.deb,
# from this checkout (docs/install-terminal.md). What goes in:
#
#   /opt/locker-agent/                    the agent: a small npm workspace of @locker/agent,
#     package.json, package-lock.json       @locker/common and @locker/lockbus (package.json, bin/,
#     packages/{agent,common,lockbus}/      dist/ compiled by scripts/build.mjs), installed with
#     node_modules/                         production dependencies only, from the repository's lock
#                                           file; native modules (better-sqlite3,
#                                           @serialport/bindings-cpp) for THIS machine's architecture
#   /usr/bin/locker-agent                 -> /opt/locker-agent/packages/agent/bin/locker-agent.js
#   /lib/systemd/system/locker-agent.service   systemd/locker-agent.service with the /opt paths
#   /lib/udev/rules.d/60-locker-agent.rules    stable names for RS485 adapters and scanners
#   /etc/locker/agent.yaml                a conffile: the settings template (packaging/agent/agent.yaml)
#   /usr/share/doc/locker-agent/          copyright, the install guide
# and the maintainer scripts of packaging/agent/DEBIAN (the `locker` user in dialout, /var/lib/locker,
# purge removes the config and the store).
#
# The native modules are built for the architecture of the machine that runs this script (x64 here,
# arm64 on a Raspberry Pi or in an arm64 container): there is no cross-compiling. Settings:
#   PACKAGE_AGENT_OUT=DIR          where the .deb goes (default: dist-packages/ in the repository)
#   PACKAGE_AGENT_ARCH=ARCH        only checks that it is this machine's (dpkg --print-architecture)
#   PACKAGE_AGENT_COMPRESSION=xz   dpkg-deb -Z (xz, gzip, zstd, none); default xz
#   PACKAGE_AGENT_REBUILD=1    always compile better-sqlite3 in the staging dir, never reuse the
#                               checkout's binary (reused only when version, arch and Node ABI match)
#   PACKAGE_AGENT_KEEP=1       keep the staging dir (its path is printed)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG_SRC="$ROOT/packaging/agent"
APP=/opt/locker-agent
WORKSPACES=(packages/common packages/lockbus packages/agent)

log() { printf '[package:agent] %s\n' "$*" >&2; }
die() { printf '[package:agent] ERROR: %s\n' "$*" >&2; exit 1; }

# the package is built from the compiled code alone: no source condition (vitest sets one) here
unset NODE_OPTIONS

command -v dpkg-deb >/dev/null || die "dpkg-deb not found (apt-get install dpkg-dev, or build on Debian / Raspberry Pi OS)"
command -v node >/dev/null || die "node not found"

HOST_ARCH="$(dpkg --print-architecture)"
ARCH="${PACKAGE_AGENT_ARCH:-$HOST_ARCH}"
[ "$ARCH" = "$HOST_ARCH" ] || die "PACKAGE_AGENT_ARCH=$ARCH but this machine is $HOST_ARCH: the native modules are built for the machine that builds; build an $ARCH package on an $ARCH machine or container (docs/install-terminal.md, 'Building the package')"
VERSION="$(node -p "require('$ROOT/packages/agent/package.json').version")"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
NODE_ABI="$(node -p 'process.versions.modules')"
NODE_ARCH="$(node -p 'process.arch')"
COMPRESSION="${PACKAGE_AGENT_COMPRESSION:-xz}"
OUT="${PACKAGE_AGENT_OUT:-$ROOT/dist-packages}"
DEB_NAME="locker-agent_${VERSION}_${ARCH}.deb"

STAGE="$(mktemp -d "${TMPDIR:-/tmp}/locker-agent-deb.XXXXXX")"
cleanup() { if [ "${PACKAGE_AGENT_KEEP:-}" = 1 ]; then log "staging dir kept: $STAGE"; else rm -rf "$STAGE"; fi; }
trap cleanup EXIT
PKGROOT="$STAGE/root"
TARGET="$PKGROOT$APP"
mkdir -p "$TARGET"

# ---------------------------------------------------------------- the agent, compiled
# scripts/build.mjs --out writes <out>/<package>/dist (the checkout's own dist/ is left alone, so
# tests running from the sources at the same time are not disturbed).
[ -f "$ROOT/scripts/build.mjs" ] || die "scripts/build.mjs (npm run build) is missing: the package ships the compiled agent"
log "compiling ${WORKSPACES[*]} (scripts/build.mjs) for $DEB_NAME"
(cd "$ROOT" && node scripts/build.mjs --out "$TARGET" --clean "${WORKSPACES[@]}") >&2
for ws in "${WORKSPACES[@]}"; do
  [ -f "$TARGET/$ws/dist/index.js" ] || die "$ws: no dist/index.js after the build"
  cp "$ROOT/$ws/package.json" "$TARGET/$ws/package.json"
  if [ -d "$ROOT/$ws/bin" ]; then cp -r "$ROOT/$ws/bin" "$TARGET/$ws/bin"; fi
  # source maps point at ../src, which is not shipped
  find "$TARGET/$ws/dist" -name '*.map' -delete
done
# the bin must run the build with plain node: no tsx on a terminal
if grep -q "tsx" "$TARGET/packages/agent/bin/locker-agent.js" && ! grep -q "dist" "$TARGET/packages/agent/bin/locker-agent.js"; then
  die "packages/agent/bin/locker-agent.js still runs the sources through tsx: it must run dist/ when present (npm run build)"
fi

# ---------------------------------------------------------------- production dependencies
# A workspace of the three packages with the repository's lock file: npm keeps the locked versions
# and prunes everything the agent does not need (the central service, dev dependencies).
node -e '
  const fs = require("fs");
  const [file, version, ...ws] = process.argv.slice(1);
  fs.writeFileSync(file, JSON.stringify({
    name: "locker-agent-install", version, private: true, type: "module",
    description: "The locker terminal agent as installed by the locker-agent Debian package",
    workspaces: ws,
  }, null, 2) + "\n");
' "$TARGET/package.json" "$VERSION" "${WORKSPACES[@]}"
cp "$ROOT/package-lock.json" "$TARGET/package-lock.json"
log "npm install --omit=dev (production dependencies, locked versions)"
(cd "$TARGET" && npm install --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error) >&2

# ---------------------------------------------------------------- native modules
BSQ="$TARGET/node_modules/better-sqlite3"
[ -d "$BSQ" ] || die "better-sqlite3 missing from the staging node_modules"
BSQ_VERSION="$(node -p "require('$BSQ/package.json').version")"
REPO_BSQ="$ROOT/node_modules/better-sqlite3"
REPO_BIN="$REPO_BSQ/build/Release/better_sqlite3.node"
if [ "${PACKAGE_AGENT_REBUILD:-}" != 1 ] && [ -f "$REPO_BIN" ] && [ "$(node -p "require('$REPO_BSQ/package.json').version")" = "$BSQ_VERSION" ]; then
  # the checkout's binary was built by this node (same ABI) on this machine (same arch) from the same
  # version: byte for byte what a rebuild would give, without compiling SQLite again
  log "better-sqlite3 $BSQ_VERSION: the checkout's binary (node ABI $NODE_ABI, $NODE_ARCH)"
  mkdir -p "$BSQ/build/Release"
  cp "$REPO_BIN" "$BSQ/build/Release/better_sqlite3.node"
else
  log "better-sqlite3 $BSQ_VERSION: building (prebuild-install, else node-gyp) for node ABI $NODE_ABI, $NODE_ARCH"
  (cd "$TARGET" && npm rebuild better-sqlite3 --foreground-scripts --loglevel=error) >&2
fi
# keep only the binary: the SQLite sources and the object files are 10+ MB
find "$BSQ/build" -mindepth 1 -maxdepth 1 ! -name Release -exec rm -rf {} +
find "$BSQ/build/Release" -mindepth 1 ! -name better_sqlite3.node -exec rm -rf {} +
rm -rf "$BSQ/deps" "$BSQ/src"

BINDINGS="$TARGET/node_modules/@serialport/bindings-cpp"
[ -d "$BINDINGS" ] || die "@serialport/bindings-cpp missing from the staging node_modules"
if [ -d "$BINDINGS/prebuilds/linux-$NODE_ARCH" ]; then
  # prebuilt N-API binaries ship inside the package: keep this architecture's only
  find "$BINDINGS/prebuilds" -mindepth 1 -maxdepth 1 ! -name "linux-$NODE_ARCH" -exec rm -rf {} +
  log "@serialport/bindings-cpp: prebuilt linux-$NODE_ARCH binary"
else
  log "@serialport/bindings-cpp: no prebuilt linux-$NODE_ARCH binary, building"
  (cd "$TARGET" && npm rebuild @serialport/bindings-cpp --foreground-scripts --loglevel=error) >&2
fi

# the staged install must load its native modules and read a config with plain node, no tsx
log "checking the staged agent"
(cd "$TARGET/packages/agent" && node --input-type=module -e '
  import { createRequire } from "node:module";
  const require = createRequire(process.cwd() + "/package.json");
  const Database = require("better-sqlite3");
  const db = new Database(":memory:"); db.prepare("select 1").get(); db.close();
  const load = require("node-gyp-build");
  load(require.resolve("@serialport/bindings-cpp/package.json").replace(/package\.json$/, ""));
') >&2 || die "the staged native modules do not load"
if (cd "$TARGET" && NODE_PATH= node -e 'require.resolve("tsx")' 2>/dev/null); then die "tsx ended up in the production dependencies"; fi
printf 'terminal: { id: staged-check, secret: staged-check-secret }\n' > "$STAGE/check.yaml"
env -i PATH="$PATH" node "$TARGET/packages/agent/bin/locker-agent.js" check-config --config "$STAGE/check.yaml" >/dev/null \
  || die "the staged agent cannot check a config (bin/locker-agent.js check-config)"

# ---------------------------------------------------------------- the rest of the file system
install -d "$PKGROOT/usr/bin" "$PKGROOT/lib/systemd/system" "$PKGROOT/lib/udev/rules.d" "$PKGROOT/etc/locker" "$PKGROOT/usr/share/doc/locker-agent"
ln -s "$APP/packages/agent/bin/locker-agent.js" "$PKGROOT/usr/bin/locker-agent"
chmod 0755 "$TARGET/packages/agent/bin/locker-agent.js"

# the unit: the repository's, with the package's paths (checked: a changed unit must not slip through)
UNIT="$PKGROOT/lib/systemd/system/locker-agent.service"
sed -e "s#^WorkingDirectory=/opt/locker\$#WorkingDirectory=$APP#" \
    -e "s#^ExecStart=/usr/bin/node /opt/locker/packages/agent/bin/locker-agent.js run\$#ExecStart=/usr/bin/node $APP/packages/agent/bin/locker-agent.js run#" \
    -e 's/^#   copy the repository to \/opt\/locker, run `npm install`, put settings in \/etc\/locker\/agent.yaml, then$/#   installed by the locker-agent package (docs\/install-terminal.md): put settings in \/etc\/locker\/agent.yaml, then/' \
    "$ROOT/systemd/locker-agent.service" > "$UNIT"
grep -qx "WorkingDirectory=$APP" "$UNIT" || die "systemd/locker-agent.service: WorkingDirectory=/opt/locker not found (update scripts/package-agent.sh)"
grep -qx "ExecStart=/usr/bin/node $APP/packages/agent/bin/locker-agent.js run" "$UNIT" || die "systemd/locker-agent.service: ExecStart not as expected (update scripts/package-agent.sh)"
if grep -q '/opt/locker/' "$UNIT"; then die "systemd/locker-agent.service: a path under /opt/locker/ left in the packaged unit"; fi

install -m 0644 "$PKG_SRC/60-locker-agent.rules" "$PKGROOT/lib/udev/rules.d/60-locker-agent.rules"
install -m 0640 "$PKG_SRC/agent.yaml" "$PKGROOT/etc/locker/agent.yaml"
install -m 0644 "$PKG_SRC/copyright" "$PKGROOT/usr/share/doc/locker-agent/copyright"
install -m 0644 "$ROOT/docs/install-terminal.md" "$PKGROOT/usr/share/doc/locker-agent/install-terminal.md"

# file modes: no group/world write anywhere; executables keep x
chmod -R u+rwX,go+rX,go-w "$PKGROOT/opt" "$PKGROOT/usr" "$PKGROOT/lib"
chmod 0755 "$PKGROOT/etc/locker"

# ---------------------------------------------------------------- DEBIAN/
install -d -m 0755 "$PKGROOT/DEBIAN"
for f in postinst prerm postrm; do install -m 0755 "$PKG_SRC/DEBIAN/$f" "$PKGROOT/DEBIAN/$f"; done
install -m 0644 "$PKG_SRC/DEBIAN/conffiles" "$PKGROOT/DEBIAN/conffiles"
INSTALLED_SIZE="$(du -sk --exclude=DEBIAN "$PKGROOT" | cut -f1)"
# the native modules are built for this Node major's ABI: the package needs that major
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@INSTALLED_SIZE@/$INSTALLED_SIZE/" \
    -e "s/@NODE_DEPENDS@/nodejs (>= $NODE_MAJOR), nodejs (<< $((NODE_MAJOR + 1)))/" \
    "$PKG_SRC/DEBIAN/control.in" > "$PKGROOT/DEBIAN/control"
(cd "$PKGROOT" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print0 | sed -z 's#^\./##' | sort -z | xargs -0 md5sum) > "$PKGROOT/DEBIAN/md5sums"
chmod 0644 "$PKGROOT/DEBIAN/md5sums" "$PKGROOT/DEBIAN/control"

mkdir -p "$OUT"
log "dpkg-deb --build ($COMPRESSION)"
dpkg-deb --root-owner-group -Z"$COMPRESSION" --build "$PKGROOT" "$OUT/$DEB_NAME" >&2
log "built $OUT/$DEB_NAME ($(du -h "$OUT/$DEB_NAME" | cut -f1), installed $((INSTALLED_SIZE / 1024)) MiB)"
echo "$OUT/$DEB_NAME"
