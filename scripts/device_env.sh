# Sourced on the GPU machine (no package registry there): if .debs/gpu-deps.tar.xz (made here by
# scripts/make_device_deps.sh, carried with carry [".debs"]) was
# carried along (OpenBLAS, GTest, nlohmann_json, CLI11, pkg-config from Debian 12 packages),
# unpack it as a prefix and point pkg-config, CMake and the loader at it. Sets FT_CMAKE_EXTRA.
export PATH=/usr/local/cuda/bin:$PATH
FT_CMAKE_EXTRA=()
if [[ -f .debs/gpu-deps.tar.xz ]]; then
  FT_DEPS=/tmp/ft-gpu-deps
  if [[ ! -d $FT_DEPS/prefix ]]; then
    mkdir -p "$FT_DEPS" && tar -C "$FT_DEPS" -xJf .debs/gpu-deps.tar.xz
  fi
  P=$FT_DEPS/prefix
  # zlib and zstd: link the image's own libraries (only their headers are carried).
  for lib in z zstd; do
    sys=$(ldconfig -p 2>/dev/null | awk -v n="lib$lib.so.1" '$1 == n && /x86-64/ {print $NF; exit}')
    [[ -n $sys && ! -e $P/lib/lib$lib.so ]] && ln -s "$sys" "$P/lib/lib$lib.so"
  done
  sed "s|@PREFIX@|$P|" "$P/lib/pkgconfig/openblas.pc.in" >"$P/lib/pkgconfig/openblas.pc"
  command -v pkg-config >/dev/null || export PATH=$PATH:$P/bin
  pkg-config --exists openblas 2>/dev/null || export PKG_CONFIG_PATH=$P/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$P/lib:$P/lib/x86_64-linux-gnu
  FT_CMAKE_EXTRA+=(-DCMAKE_PREFIX_PATH=$P -DCMAKE_INCLUDE_PATH=$P/include)
fi
