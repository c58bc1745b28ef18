#!/usr/bin/env bash
# `cmake --install` puts the library (static + shared with SONAME), header, CLI and pkg-config file in
# place, and a program builds against the installed copy with pkg-config alone.
set -euo pipefail
build="$(dirname "$MOQ_BIN")"
prefix="${MOQ_TMP:-/tmp}/install.$$"
rm -rf "$prefix"; mkdir -p "$prefix"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/moq include/moq.h lib/libmoq.a lib/libmoq.so lib/pkgconfig/moq.pc; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
readelf -d "$prefix/lib/libmoq.so" | grep -q 'SONAME.*libmoq.so.0' || { echo "libmoq.so has no versioned SONAME"; exit 1; }
# Only moq_ symbols are exported from the shared library.
if nm -D --defined-only "$prefix/lib/libmoq.so" | awk '{print $3}' | grep -v '^moq_' | grep -v '^_' | grep -q .; then
  echo "non-API symbols exported:"; nm -D --defined-only "$prefix/lib/libmoq.so" | awk '{print $3}' | grep -v '^moq_'; exit 1
fi
cat > "$prefix/x.c" <<'C'
#include <moq.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    moq_error e;
    moq_checkpoint *c = NULL;
    moq_status s = moq_checkpoint_open(&c, "/nonexistent/moq", NULL, &e);
    printf("%s %d\n", moq_version_string(), (int)s);
    return (s == MOQ_ERR_IO && c == NULL && strstr(e.where, "/nonexistent/moq")) ? 0 : 1;
}
C
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
san=$(sed -n 's/^MOQ_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
sanflags=(); [ -n "$san" ] && sanflags=(-fsanitize="${san//;/,}")
cc "${sanflags[@]}" "$prefix/x.c" $(pkg-config --cflags --libs moq) -o "$prefix/x"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/x"
