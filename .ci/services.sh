#!/usr/bin/env bash
# Installs the real servers and tools that the tests use, when they are missing:
# ZooKeeper (Debian's zookeeper package; it needs the JRE that our machines
# have), MariaDB (Debian's mariadb-server), promtool (Debian's prometheus
# package, for `promtool check metrics`) and chromium (Debian's chromium, the
# browser the dashboard test drives headless through chromedp), nc and curl
# (netcat-openbsd and curl: the README's walkthroughs, run by internal/doctest)
# and python (python3 with python3-pytest, python3-setuptools and python3-pip:
# the Python client's tests, clients/python).
# It only installs: the tests
# start their own servers on free 127.0.0.1 ports with scratch data dirs
# (internal/testsvc), so nothing is left running.
#
#   .ci/services.sh install [zookeeper] [mariadb] [promtool] [chromium] [tools] [python]   (default: all)
#
# Idempotent and cheap once installed (a dpkg check). Concurrent callers (go
# test runs packages in parallel) serialise on a lock file. The packages'
# maintainer scripts are kept from starting system services (policy-rc.d).
set -euo pipefail

usage() { echo "usage: $0 install [zookeeper] [mariadb] [promtool] [chromium] [tools] [python]" >&2; exit 2; }
[ "${1:-}" = install ] || usage
shift
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(zookeeper mariadb promtool chromium tools python)

# pkgs_for NAME prints the Debian packages of a service.
pkgs_for() {
	case "$1" in
	zookeeper) echo "zookeeper" ;;
	mariadb) echo "mariadb-server mariadb-client" ;;
	promtool) echo "prometheus" ;; # promtool, for `promtool check metrics`
	chromium) echo "chromium" ;;   # the dashboard's browser test (chromedp)
	tools) echo "netcat-openbsd curl" ;; # nc -q1 and curl of the README's walkthroughs (internal/doctest)
	python) echo "python3 python3-pytest python3-setuptools python3-pip" ;; # clients/python's tests
	*) echo "unknown service $1" >&2; exit 2 ;;
	esac
}

installed() { # all packages installed ("install ok installed")?
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 1
	done
}

missing=()
for s in "${wanted[@]}"; do
	# shellcheck disable=SC2207
	ps=($(pkgs_for "$s"))
	installed "${ps[@]}" || missing+=("${ps[@]}")
done
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" != 0 ]; then
	echo "services.sh: need root to install ${missing[*]}" >&2
	case "${CI:-}" in
	"" | false | 0)
		# Outside CI the tests that need them skip, saying why.
		echo "services.sh: continuing; tests that need them will be skipped" >&2
		exit 0
		;;
	esac
	exit 1
fi

exec 9>/tmp/metaq-services.lock
if ! flock -w 900 9; then
	echo "services.sh: timed out waiting for another install" >&2
	exit 1
fi
# Another caller may have installed them while we waited.
still=()
for p in "${missing[@]}"; do installed "$p" || still+=("$p"); done
[ ${#still[@]} -gt 0 ] || exit 0

echo "services.sh: installing ${still[*]}" >&2
created_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	created_policy=1
fi
cleanup() { [ "$created_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
timeout 300 apt-get update -q >&2
timeout 900 apt-get install -y -q --no-install-recommends "${still[@]}" >&2
for p in "${still[@]}"; do
	installed "$p" || { echo "services.sh: $p did not install" >&2; exit 1; }
done
echo "services.sh: installed ${still[*]}" >&2
