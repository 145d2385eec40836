# Sourced by scripts/app.sh and scripts/test.sh: the project's own virtual environment.
#
# Everything is installed into .venv (GEM_VENV overrides the path), never into the interpreter's
# own site-packages: a stock Debian or Ubuntu python3 refuses that (PEP 668,
# externally-managed-environment), and it would mix the project's pins into the user's system.
# Where python3 cannot make a venv (Debian without python3-venv), the package is installed with
# apt-get, as the test command does for Chromium.
#
# gem_install FILE: install FILE's requirements into the venv once per version of FILE,
# requirements.txt and pyproject.toml (a stamp in the user's cache, named after their hash and the
# venv's path and identity, says the install finished; pip re-checking an installed environment
# costs seconds).
# Sets GEM_PY to the venv's python.

GEM_VENV="${GEM_VENV:-.venv}"

_gem_sudo() {
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo "$@"; else "$@"; fi
}

gem_make_venv() {
  if [ -x "$GEM_VENV/bin/python" ]; then
    return 0
  fi
  if ! python3 -m venv "$GEM_VENV" >/dev/null 2>&1; then
    rm -rf "$GEM_VENV"
    if command -v apt-get >/dev/null 2>&1; then
      echo "python3 cannot create a virtual environment: installing python3-venv" >&2
      _gem_sudo apt-get update -qq && _gem_sudo apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$GEM_VENV" || {
      echo "error: could not create $GEM_VENV; install your distribution's python3-venv" \
           "package (or Python 3.10+ with venv) and run this again" >&2
      exit 1
    }
  fi
}

# RDKit's wheel links the X11 render libraries (its drawing code), which a minimal Debian or a
# container lacks: "ImportError: libXrender.so.1" on the first molecule. Installed with apt-get.
gem_system_libs() {
  command -v ldconfig >/dev/null 2>&1 || return 0
  local missing=""
  ldconfig -p | grep -q "libXrender.so.1" || missing="$missing libxrender1"
  ldconfig -p | grep -q "libXext.so.6" || missing="$missing libxext6"
  ldconfig -p | grep -q "libX11.so.6" || missing="$missing libx11-6"
  if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing the system libraries RDKit needs:$missing" >&2
    _gem_sudo apt-get update -qq && _gem_sudo apt-get install -y -qq $missing >/dev/null \
      || echo "warning: could not install$missing; drawing molecules will fail" >&2
  fi
}

gem_install() {
  local file="$1"
  gem_system_libs
  gem_make_venv
  GEM_PY="$GEM_VENV/bin/python"
  local venv_path stamp_dir stamp
  venv_path="$(cd "$GEM_VENV" && pwd)"
  stamp_dir="${XDG_CACHE_HOME:-$HOME/.cache}/gem-explorer"
  # the venv's identity (its pyvenv.cfg, written when it was made) is in the stamp's name too: a
  # venv deleted and made again at the same path is empty, whatever an old stamp says
  local venv_id
  venv_id="$("$GEM_PY" -c 'import os, sys
s = os.stat(os.path.join(sys.prefix, "pyvenv.cfg")); print(s.st_ino, s.st_mtime_ns)')"
  stamp="$stamp_dir/installed-$(cat "$file" requirements.txt pyproject.toml \
    <(echo "$venv_path $venv_id") | sha256sum | cut -c1-16)"
  local installed_here='import os, gem_core; here = os.path.realpath(".") + os.sep
raise SystemExit(not os.path.realpath(gem_core.__file__).startswith(here))'
  if [ ! -f "$stamp" ] || ! "$GEM_PY" -c "$installed_here" >/dev/null 2>&1; then
    "$GEM_PY" -m pip install -q -r "$file"
    mkdir -p "$stamp_dir" && touch "$stamp"
  fi
}
