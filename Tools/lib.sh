# Shared by Tools/chorus and Tools/test: make sure the system libraries are
# installed, then build. Sourced, not run.

chorus_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Installs liblmdb-dev and libsodium-dev (and pkg-config) when missing.
ensure_system_packages() {
    local missing=()
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    if command -v pkg-config >/dev/null 2>&1; then
        pkg-config --exists lmdb || missing+=(liblmdb-dev)
        pkg-config --exists libsodium || missing+=(libsodium-dev)
    else
        missing+=(liblmdb-dev libsodium-dev)
    fi
    # The descriptor-flood test opens its idle connections from python3.
    [ -x /usr/bin/python3 ] || missing+=(python3)
    # The README's tour, which Tools/test runs as written, calls curl.
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" = 0 ]; then
        echo "Installing ${missing[*]} (apt-get)..." >&2
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        echo "Installing ${missing[*]} (sudo apt-get)..." >&2
        sudo apt-get update -qq >&2 && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    else
        echo "Chorus needs these Debian packages: ${missing[*]}" >&2
        echo "Install them as root:  apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 2
    fi
}

# Installs Chromium (for the web page's browser test) when missing and this
# user may install packages; otherwise the test says it is skipped.
ensure_browser() {
    command -v chromium >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing chromium (apt-get) for the browser test..." >&2
        { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2 ||
            { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2; }; } || echo "Could not install chromium; the browser test will be skipped." >&2
    fi
}

# Installs the OpenAPI validator from PyPI when missing (skipped if pip cannot).
ensure_openapi_validator() {
    python3 -c "import openapi_spec_validator" 2>/dev/null && return 0
    python3 -m pip install --quiet --disable-pip-version-check openapi-spec-validator >&2 2>/dev/null ||
        echo "Could not install openapi-spec-validator; the OpenAPI document will not be validated." >&2
}

# Installs schemathesis (the property-based client the API test runs
# against Specs/api.openapi.json) from PyPI into a virtual environment of
# its own, since Debian's python3 is externally managed, and names it in
# CHORUS_SCHEMATHESIS. When it cannot be installed the test is skipped, loudly.
ensure_schemathesis() {
    local venv="${XDG_CACHE_HOME:-$HOME/.cache}/chorus/schemathesis"
    if [ ! -x "$venv/bin/st" ]; then
        echo "Installing schemathesis (PyPI) into $venv for the API test..." >&2
        if ! python3 -m venv "$venv" >&2 2>/dev/null; then
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2 || true
            fi
            rm -rf "$venv"
            python3 -m venv "$venv" >&2 || true
        fi
        if [ ! -x "$venv/bin/pip" ] ||
            ! "$venv/bin/pip" install --quiet --disable-pip-version-check 'schemathesis>=4.3,<5' >&2; then
            echo "Could not install schemathesis; the API will NOT be checked against its OpenAPI document." >&2
            export CHORUS_SCHEMATHESIS=skip
            return 0
        fi
    fi
    export CHORUS_SCHEMATHESIS="$venv/bin/st"
}

# The package traits every build of the tools and tests enables: `Service`
# brings the HTTP API and service life cycle that `chorus serve` needs (an
# app that depends on the library leaves it off; Package.swift).
chorus_traits=(--traits Service)

# Builds the given products in debug mode; prints the build log only on failure.
build_products() {
    local log
    log="$(mktemp)"
    echo "Building ${*}..." >&2
    for p in "$@"; do
        if ! (cd "$chorus_root" && swift build "${chorus_traits[@]}" --product "$p") >"$log" 2>&1; then
            cat "$log" >&2
            rm -f "$log"
            echo "Build failed." >&2
            exit 2
        fi
    done
    rm -f "$log"
}

chorus_bin() {
    echo "$(cd "$chorus_root" && swift build --show-bin-path)/chorus"
}
