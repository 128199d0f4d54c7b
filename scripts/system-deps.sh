#!/usr/bin/env bash
# Installs the system packages Penumbra needs when they are missing: a Python venv,
# Java 17 (Spark, and javac for the job's file system class), redis-server, Chromium (the dashboard's browser tests), promtool
# (Prometheus's checker, for the metrics test) and alertmanager (for the Alertmanager
# contact point's test): each the one binary, taken out of Debian's package without
# installing the server. Debian/apt; runs apt-get only when
# something is missing.
set -euo pipefail

cd "$(dirname "$0")/.."
missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
java_major=$( (java -version 2>&1 || true) | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then missing+=(openjdk-17-jre-headless); fi
# javac builds the job's local file system class (scripts/build-hadoop-fs.sh)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
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

# fetch_tool PACKAGE PATH NAME: the one binary PATH of Debian's PACKAGE as var/tools/NAME,
# without installing the package (nor starting its service)
fetch_tool() {
  mkdir -p var/tools
  local work
  work=$(mktemp -d)
  if ! (cd "$work" && apt-get download "$1" >/dev/null 2>&1); then
    [ "$updated" -eq 1 ] || { $sudo apt-get update -qq; updated=1; }
    (cd "$work" && apt-get download "$1" >/dev/null 2>&1)
  fi
  dpkg-deb --fsys-tarfile "$work"/"$1"_*.deb | tar -x -O ".$2" > "var/tools/$3.part"
  chmod 755 "var/tools/$3.part"
  mv "var/tools/$3.part" "var/tools/$3"
  rm -rf "$work"
}

if [ ! -x var/tools/promtool ] && ! command -v promtool >/dev/null 2>&1; then
  echo "fetching promtool from Debian's prometheus package (the server is not installed)"
  # only the metrics test needs it (it skips, saying so, without it): never fail the set-up for it
  (set -e; fetch_tool prometheus /usr/bin/promtool promtool) \
    || echo "warning: could not fetch promtool; the Prometheus format test will skip"
fi
# Debian's alertmanager reads its notification templates from this folder, built in
AM_TEMPLATES=/usr/share/prometheus/alertmanager
AM_TEMPLATE=$AM_TEMPLATES/email.tmpl
fetch_alertmanager() {
  fetch_tool prometheus-alertmanager /usr/bin/prometheus-alertmanager alertmanager
  if [ ! -f "$AM_TEMPLATE" ]; then
    local work name
    work=$(mktemp -d)
    (cd "$work" && apt-get download prometheus-alertmanager >/dev/null 2>&1)
    for name in default.tmpl email.tmpl; do
      dpkg-deb --fsys-tarfile "$work"/prometheus-alertmanager_*.deb | tar -x -O ".$AM_TEMPLATES/$name" > "$work/$name"
      $sudo install -D -m 644 "$work/$name" "$AM_TEMPLATES/$name"
    done
    rm -rf "$work"
  fi
}
if { [ ! -x var/tools/alertmanager ] || [ ! -f "$AM_TEMPLATE" ]; } && ! command -v prometheus-alertmanager >/dev/null 2>&1; then
  echo "fetching alertmanager and its default template from Debian's prometheus-alertmanager package" \
       "(the package is not installed: no service starts)"
  # only the Alertmanager contact point's test needs it (it skips, saying so, without it)
  (set -e; fetch_alertmanager) || echo "warning: could not fetch alertmanager; the Alertmanager test will skip"
fi
