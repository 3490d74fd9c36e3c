#!/usr/bin/env bash
# Builds the Java package with the JDK and a C compiler only (no Maven):
#   1. the static C ABI library (sdk/ffi), with cargo when asked (--cargo),
#      else from $FLAGSTREAM_FFI_LIB, else target/bindings/<profile>/;
#   2. the JNI glue (src/main/c) linked with it into libflagstream_jni.so;
#   3. the classes (javac --release 17) and flagstream.jar, the .so inside
#      as /flagstream/native/<os>-<arch>/libflagstream_jni.so (+ .sha256);
#   4. the tests (against junit-platform-console-standalone.jar) and the
#      benchmark.
#
#   sdk/java/build.sh [--cargo] [--release] [--out DIR] [--test]
#
#   --cargo     build the static library first (cargo build -p flagstream-ffi
#               --lib, CARGO_TARGET_DIR=target/bindings unless set)
#   --release   the release library (default: debug)
#   --out DIR   output directory (default: $FLAGSTREAM_JAVA_OUT or sdk/java/build)
#   --test      then run the JUnit suite (needs FLAGSTREAM_RELAY_BIN,
#               FLAGSTREAM_FLAGCTL_BIN and FLAGSTREAM_EVAL_JSON; see README.md)
#
# Environment: FLAGSTREAM_FFI_LIB (a libflagstream_ffi.a), JAVA_HOME (else
# found from javac), CC (default cc), JUNIT_JAR (default
# /usr/share/java/junit-platform-console-standalone.jar).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
profile=debug
cargo_build=0
run_tests=0
out="${FLAGSTREAM_JAVA_OUT:-$here/build}"
while [ $# -gt 0 ]; do
    case "$1" in
        --cargo) cargo_build=1 ;;
        --release) profile=release ;;
        --out) out="$2"; shift ;;
        --test) run_tests=1 ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"

need() {
    command -v "$1" >/dev/null 2>&1 || { echo "build.sh: $1 not found: $2" >&2; exit 69; }
}
need javac "install a JDK 17 or newer (Debian: apt-get install openjdk-17-jdk-headless)"
need jar "install a JDK 17 or newer"
cc="${CC:-cc}"
need "$cc" "install a C compiler (Debian: apt-get install gcc)"
junit="${JUNIT_JAR:-/usr/share/java/junit-platform-console-standalone.jar}"
[ -f "$junit" ] || { echo "build.sh: $junit not found (Debian: apt-get install junit5)" >&2; exit 69; }
java_home="${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")}"
[ -f "$java_home/include/jni.h" ] || { echo "build.sh: no jni.h under $java_home/include: set JAVA_HOME" >&2; exit 69; }

# 1. The static library.
if [ "$cargo_build" = 1 ]; then
    flags=(build -p flagstream-ffi --lib)
    [ "$profile" = release ] && flags+=(--release)
    (cd "$repo" && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target/bindings}" cargo "${flags[@]}")
    lib="${CARGO_TARGET_DIR:-$repo/target/bindings}/$profile/libflagstream_ffi.a"
else
    lib="${FLAGSTREAM_FFI_LIB:-$repo/target/bindings/$profile/libflagstream_ffi.a}"
fi
[ -f "$lib" ] || {
    echo "build.sh: $lib not found: run with --cargo, or set FLAGSTREAM_FFI_LIB to a libflagstream_ffi.a" >&2
    exit 66
}

# 2. The glue (every src/main/c/*.c), with the library linked in. Its
#    symbols stay inside the .so (--exclude-libs for the library's, hidden
#    visibility for the glue's helpers): only JNI_OnLoad and Java_* are
#    exported.
case "$(uname -s)" in Linux) os=linux ;; Darwin) os=macos ;; *) os="$(uname -s | tr 'A-Z' 'a-z')" ;; esac
case "$(uname -m)" in x86_64|amd64) arch=x86_64 ;; arm64|aarch64) arch=aarch64 ;; *) arch="$(uname -m)" ;; esac
native="$out/resources/flagstream/native/$os-$arch"
rm -rf "$out/resources"
mkdir -p "$native"
so="$native/libflagstream_jni.so"
glue=("$here"/src/main/c/*.c)
"$cc" -shared -fPIC -O2 -Wall -Werror -fvisibility=hidden \
    -Wl,-z,defs -Wl,--exclude-libs,ALL -Wl,--gc-sections \
    -I"$java_home/include" -I"$java_home/include/linux" -I"$repo/sdk/ffi/include" \
    -o "$so" "${glue[@]}" "$lib" -lpthread -ldl -lm -static-libgcc
[ "$profile" = release ] && strip --strip-unneeded "$so" 2>/dev/null || true
(cd "$native" && sha256sum libflagstream_jni.so | cut -d' ' -f1 > libflagstream_jni.so.sha256)

# 3. Classes and the jar.
rm -rf "$out/classes" "$out/test-classes" "$out/bench-classes"
find "$here/src/main/java" -name '*.java' > "$out/main-sources.txt"
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$out/classes" @"$out/main-sources.txt"
printf 'Automatic-Module-Name: dev.flagstream\n' > "$out/manifest.txt"
jar --create --file "$out/flagstream.jar" --manifest "$out/manifest.txt" -C "$out/classes" . -C "$out/resources" .

# 4. Tests and the benchmark.
find "$here/src/test/java" -name '*.java' > "$out/test-sources.txt"
javac --release 17 -Xlint:all,-serial,-try -Werror -encoding UTF-8 -cp "$out/flagstream.jar:$junit" \
    -d "$out/test-classes" @"$out/test-sources.txt"
find "$here/src/bench/java" -name '*.java' > "$out/bench-sources.txt"
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -cp "$out/flagstream.jar" \
    -d "$out/bench-classes" @"$out/bench-sources.txt"

echo "built $out/flagstream.jar ($(du -h "$so" | cut -f1) native library for $os-$arch, $profile)"

if [ "$run_tests" = 1 ]; then
    exec java -jar "$junit" --class-path "$out/flagstream.jar:$out/test-classes" \
        --scan-classpath --fail-if-no-tests --disable-banner --details=tree
fi
