#!/usr/bin/env bash
# The README's test command on a CPU that neither GCC 12 nor PoCL's LLVM 14 knows, emulated by
# qemu-x86_64 (user mode) as a CPU of Intel's family 19. Both read the CPU with cpuid, so each
# answers there as it would on such a machine: GCC resolves -march=native to core2 with generic
# tuning, LLVM 14 names the CPU "generic" and PoCL's pip build then builds nothing.
#   1. the whole suite natively, with the C compiler's driver on the emulated CPU (what the CPU
#      device learns from -march=native comes from there; cc1, as and ld run natively);
#   2. the tests that use OpenCL with the interpreter itself on the emulated CPU (PoCL reads the
#      CPU in its process), with every installed platform, then with PoCL's pip build alone
#      (the distribution's PoCL hidden). QEMU runs no AVX-512, so the CPU device runs at avx2
#      in this stage; it is several times slower than native (15-30 minutes on 2 cores).
# Usage: bash scripts/unknown_cpu.sh [1|2]   (both stages without an argument)
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES=${1:-12}
CPU=${UNKNOWN_CPU:-max,vendor=GenuineIntel,family=19,model=1}
command -v qemu-x86_64 >/dev/null || { apt-get update -qq && apt-get install -y -qq qemu-user; }
EMU=$(mktemp -d)
mkdir -p "$EMU/bin"
printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s %s "$@"\n' "$CPU" "$(command -v gcc)" > "$EMU/bin/gcc"
chmod +x "$EMU/bin/gcc"
ln -s gcc "$EMU/bin/cc"
RESOLVED=$("$EMU/bin/gcc" -march=native -Q --help=target |
    awk '$1 == "-march=" || $1 == "-mtune=" {printf "%s%s ", $1, $2}')
echo "the compiler's driver on the emulated CPU: -march=native is $RESOLVED"

if [[ $STAGES == *1* ]]; then
    echo "== 1: the suite, the compiler's driver on the emulated CPU"
    PATH="$EMU/bin:$PATH" bash scripts/test.sh || FAILED=1
fi

if [[ $STAGES == *2* ]]; then
    VENV=${VENV:-.venv}
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV" && "$VENV/bin/pip" install -q -e ".[test]"
    fi
    # a copy of the environment whose interpreter runs on the emulated CPU; the processes it
    # starts through sys.executable (the search's runners) run there too
    cp -a "$VENV" "$EMU/venv"
    BASE=$(readlink -f "$VENV/bin/python3")
    rm -f "$EMU/venv/bin/python" "$EMU/venv/bin/python3" "$EMU/venv/bin/python3"*.*
    printf '#!/bin/sh\nexec qemu-x86_64 -0 "$0" -cpu %s %s "$@"\n' "$CPU" "$BASE" \
        > "$EMU/venv/bin/python3"
    chmod +x "$EMU/venv/bin/python3"
    ln -s python3 "$EMU/venv/bin/python"
    TESTS=$(grep -l -i opencl -r tests --include 'test_*.py' | sort)
    emulated() {  # the environment's interpreter on the emulated CPU, the CPU device at avx2
        env PATH="$EMU/bin:$PATH" TUNESEARCH_CPU_ISA=avx2 \
            TUNESEARCH_CACHE="$(mktemp -d)/tunesearch" ${VENDORS:+OCL_ICD_VENDORS=$VENDORS} \
            "$EMU/venv/bin/python" "$@"
    }
    mkdir -p "$EMU/no-vendors"
    for VENDORS in "" "$EMU/no-vendors"; do
        if [ -n "$VENDORS" ]; then PLATFORMS="the pip build of PoCL alone"
        else PLATFORMS="every installed platform"; fi
        echo "== 2: OpenCL on the emulated CPU, $PLATFORMS"
        emulated -m tunesearch devices | grep -A1 '^opencl'
        emulated -m pytest -q -rs -n "${TEST_WORKERS:-auto}" --maxprocesses 4 --dist loadfile \
            $TESTS || FAILED=1
    done
fi
exit "${FAILED:-0}"
