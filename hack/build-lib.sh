# Shell functions the build scripts share (sourced; each script defines its own log()).

# Run a command quietly; on failure show its output and stop.
quiet() {
  local out
  out="$(mktemp)"
  if ! "$@" >"$out" 2>&1; then
    log "command failed (in $PWD): $*"
    tail -n 60 "$out" >&2
    rm -f "$out"
    exit 1
  fi
  rm -f "$out"
}
