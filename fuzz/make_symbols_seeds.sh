#!/bin/sh
# Writes the seed corpus of fuzz_symbols into DIR (fuzz/corpus/symbols/):
# small real objects, each as the harness reads its input
# ([flags][object size][4 addresses][object][debug file]).
# Needs gcc, g++, objcopy, strip, nm and python3.
set -eu
out=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat > lib.c <<'C'
static inline int sq(int x) { return x * x; }
__attribute__((noinline)) int leaf(int x) { return sq(x) + 1; }
__attribute__((noinline)) static int helper(int x) { return leaf(x) * 2; }
int api(int x) { return helper(x) + sq(x + 1); }
C
cat > lib.cpp <<'C'
namespace ns { template <typename T> struct Box { T v; __attribute__((noinline)) T get() const { return v + 1; } }; }
int cxx_api(int x) { ns::Box<int> b{x}; return b.get(); }
C
# pack NAME FLAGS OBJECT [DEBUG]
pack() {
  python3 - "$out/$1" "$2" "$3" "${4:-}" <<'PY'
import struct, subprocess, sys
dest, flags, obj, dbg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
o = open(obj, 'rb').read()
d = open(dbg, 'rb').read() if dbg else b''
addrs = []
for line in subprocess.run(['nm', dbg or obj], capture_output=True, text=True).stdout.splitlines():
    f = line.split()
    if len(f) == 3 and f[1] in 'tT':
        addrs.append(int(f[0], 16) + 1)
addrs = (addrs + [0, 0, 0, 0])[:4]
open(dest, 'wb').write(bytes([flags]) + struct.pack('<I', len(o)) +
                       b''.join(struct.pack('<Q', a) for a in addrs) + o + d)
PY
}
gcc -shared -fPIC -O1 -g -o dwarf5.so lib.c && pack dwarf5 1 dwarf5.so
gcc -shared -fPIC -O1 -gdwarf-4 -o dwarf4.so lib.c && pack dwarf4 1 dwarf4.so
gcc -shared -fPIC -O1 -g -gz=zlib -o gz.so lib.c && pack compressed 1 gz.so
gcc -shared -fPIC -O1 -g -Wl,--build-id=none -o noid.so lib.c && pack no_build_id 0 noid.so
gcc -shared -fPIC -O1 -o nodebug.so lib.c && pack symtab_only 1 nodebug.so
g++ -shared -fPIC -O1 -g -o cxx.so lib.cpp && pack cxx 1 cxx.so
gcc -shared -fPIC -O1 -g -o split.so lib.c
objcopy --only-keep-debug split.so fuzz.debug
strip --strip-debug split.so
objcopy --add-gnu-debuglink=fuzz.debug split.so
pack debuglink 0 split.so fuzz.debug
pack build_id_debug 1 split.so fuzz.debug
