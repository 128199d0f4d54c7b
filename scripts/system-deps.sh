#!/usr/bin/env bash
# Installs the system packages Penumbra needs when they are missing: a Python venv,
# Java 17 (Spark), redis-server, Chromium (the dashboard's browser tests), and promtool
# (Prometheus's checker, for the metrics test: the one binary, taken out of Debian's
# prometheus package without installing the server). Debian/apt; runs apt-get only when
# something is missing.
set -euo pipefail

cd "$(dirname "$0")/.."
missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
java_major=$( (java -version 2>&1 || true) | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then missing+=(openjdk-17-jre-headless); fi
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  $sudo apt-get update -qq
  updated=1
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

fetch_promtool() {
  mkdir -p var/tools
  local work
  work=$(mktemp -d)
  if ! (cd "$work" && apt-get download prometheus >/dev/null 2>&1); then
    [ "$updated" -eq 1 ] || $sudo apt-get update -qq
    (cd "$work" && apt-get download prometheus >/dev/null 2>&1)
  fi
  dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -O ./usr/bin/promtool > var/tools/promtool.part
  chmod 755 var/tools/promtool.part
  mv var/tools/promtool.part var/tools/promtool
  rm -rf "$work"
}

if [ ! -x var/tools/promtool ] && ! command -v promtool >/dev/null 2>&1; then
  echo "fetching promtool from Debian's prometheus package (the server is not installed)"
  # only the metrics test needs it (it skips, saying so, without it): never fail the set-up for it
  (set -e; fetch_promtool) || echo "warning: could not fetch promtool; the Prometheus format test will skip"
fi
