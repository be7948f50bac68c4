#!/usr/bin/env bash
# Packs the Debian 12 libraries that the GPU machine's image lacks (OpenBLAS with its Fortran
# runtime, GoogleTest, nlohmann-json, CLI11, pkg-config, SentencePiece, Snappy, toml++, and the
# zlib/zstd headers) into .debs/gpu-deps.tar.xz, a prefix
# that scripts/device_env.sh unpacks there (the GPU machine has no package registry).
# Run here, on the development machine, before the first device call of a session:
#   bash scripts/make_device_deps.sh
# then pass carry [".debs"] to the device tool. .debs/ is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libgtest-dev nlohmann-json3-dev libcli11-dev pkgconf
      libsentencepiece-dev libtomlplusplus-dev libsnappy-dev libzstd-dev zlib1g-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
ML=/usr/lib/x86_64-linux-gnu
work=$(mktemp -d)
P=$work/prefix
mkdir -p "$P"/{bin,include,lib/pkgconfig,lib/x86_64-linux-gnu/cmake,share/cmake}
cp -L "$ML/openblas-pthread/libopenblas.so.0" "$P/lib/" && ln -s libopenblas.so.0 "$P/lib/libopenblas.so"
cp -L "$ML/libgfortran.so.5" "$ML/libquadmath.so.0" "$P/lib/"
cp /usr/include/x86_64-linux-gnu/openblas-pthread/{cblas.h,f77blas.h,openblas_config.h} "$P/include/"
cat >"$P/lib/pkgconfig/openblas.pc.in" <<'PC'
prefix=@PREFIX@
libdir=${prefix}/lib
includedir=${prefix}/include
Name: openblas
Description: OpenBLAS (carried for the device machine)
Version: 0.3.21
Libs: -L${libdir} -lopenblas
Cflags: -I${includedir}
PC
cp -L /usr/bin/pkg-config "$P/bin/pkg-config" && cp -L "$ML/libpkgconf.so.3" "$P/lib/"
cp -r /usr/include/gtest /usr/include/gmock /usr/include/nlohmann /usr/include/CLI "$P/include/"
cp "$ML"/libgtest.a "$ML"/libgtest_main.a "$ML"/libgmock.a "$ML"/libgmock_main.a "$P/lib/x86_64-linux-gnu/"
cp -r "$ML/cmake/GTest" "$P/lib/x86_64-linux-gnu/cmake/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$P/share/cmake/"
# SentencePiece and Snappy (libraries and headers), toml++ (headers only). zlib and zstd: the
# headers only; scripts/device_env.sh links the image's own libz/libzstd (a second copy on
# LD_LIBRARY_PATH could shadow a newer one that PyTorch needs).
cp -P "$ML"/libsentencepiece.so* "$ML"/libsentencepiece_train.so* "$ML"/libsnappy.so* "$P/lib/"
cp /usr/include/sentencepiece_processor.h /usr/include/sentencepiece_trainer.h /usr/include/snappy*.h "$P/include/"
cp -r /usr/include/toml++ "$P/include/"
cp /usr/include/zstd.h /usr/include/zstd_errors.h /usr/include/zdict.h /usr/include/zlib.h /usr/include/zconf.h \
  "$P/include/" 2>/dev/null || cp /usr/include/zstd.h /usr/include/zlib.h "$P/include/"
[ -f /usr/include/x86_64-linux-gnu/zconf.h ] && cp /usr/include/x86_64-linux-gnu/zconf.h "$P/include/"
mkdir -p .debs
tar -C "$work" -cJf .debs/gpu-deps.tar.xz prefix
rm -rf "$work"
echo "wrote .debs/gpu-deps.tar.xz ($(du -h .debs/gpu-deps.tar.xz | cut -f1))"
