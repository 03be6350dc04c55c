#!/usr/bin/env bash
# Shared by ./ucx4j and scripts/test: finds JDK 25+, makes sure UCX (libucp >= 1.13) and its headers are there.
# Installs Debian's libucx0/libucx-dev/ucx-utils with apt-get when run as root; otherwise stops with one line.

ucx4j_find_java() {
  local c
  for c in "${JAVA_HOME:-}" /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/*25* /usr/lib/jvm/*2[6-9]*; do
    [ -n "$c" ] && [ -x "$c/bin/java" ] || continue
    local v
    v=$("$c/bin/java" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
    if [ "${v%%.*}" -ge 25 ] 2>/dev/null; then
      export JAVA_HOME="$c"
      return 0
    fi
  done
  echo "ucx4j: needs JDK 25 or newer: install one under /usr/lib/jvm (e.g. temurin-25-jdk) or set JAVA_HOME" >&2
  exit 1
}

ucx4j_ensure_ucx() {
  if [ -n "${UCX4J_UCX_HOME:-}" ]; then return 0; fi
  # ldconfig lives in /sbin, off a non-root user's PATH on Debian; its listing is read whole (a pipe into grep -q
  # could end it with SIGPIPE, which pipefail turns into a failure)
  local libs
  libs=$(PATH="$PATH:/sbin:/usr/sbin" ldconfig -p 2>/dev/null || true)
  if [[ "$libs" == *libucp.so.0* ]] && [ -f /usr/include/ucp/api/ucp.h ] \
      && command -v ucx_perftest >/dev/null 2>&1; then
    return 0
  fi
  if ucx4j_apt_install libucx0 libucx-dev ucx-utils; then
    return 0
  fi
  echo "ucx4j: UCX not found: run 'sudo apt-get install libucx0 libucx-dev ucx-utils' (or set UCX4J_UCX_HOME to a UCX >= 1.13 prefix)" >&2
  exit 1
}

# Installs Debian packages with apt-get when root (exits with one line if apt-get fails); false when not root.
ucx4j_apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ucx4j: installing $* with apt-get" >&2
    local apt=(apt-get -o DPkg::Lock::Timeout=300 install -y -q "$@")
    ("${apt[@]}" >/dev/null 2>&1 \
      || { apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 && "${apt[@]}" >/dev/null; }) \
      || { echo "ucx4j: apt-get could not install $*" >&2; exit 1; }
    return 0
  fi
  return 1
}

# The tests compile small C programs against UCX's headers (struct layouts, a raw UCX peer).
ucx4j_ensure_gcc() {
  command -v gcc >/dev/null 2>&1 && return 0
  ucx4j_apt_install gcc libc6-dev && return 0
  echo "ucx4j: gcc not found (the struct-layout test compiles C): run 'sudo apt-get install gcc'" >&2
  exit 1
}

ucx4j_ensure_tools() {
  command -v mvn >/dev/null 2>&1 || { echo "ucx4j: Maven not found: run 'sudo apt-get install maven'" >&2; exit 1; }
}
