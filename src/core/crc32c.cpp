// CRC-32C: SSE4.2 `crc32` instruction when the CPU has it (checked once with cpuid), else
// table-driven slicing-by-8 (8 bytes per step, 8 KiB of tables built at compile time).
#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FT_CRC32C_X86 1
#include <nmmintrin.h>
#endif

namespace ft {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  // t[k][i]: CRC of byte i followed by k zero bytes; lets one step consume 8 bytes.
  for (int k = 1; k < 8; ++k)
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  return t;
}

constexpr Tables kTables = make_tables();
static_assert(kTables[0][1] == 0xF26B8303u, "CRC-32C table");

// Operates on the inverted register (no pre/post inversion).
uint32_t crc_table(uint32_t c, const uint8_t* p, size_t n) {
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
    --n;
  }
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    lo = __builtin_bswap32(lo);
    hi = __builtin_bswap32(hi);
#endif
    lo ^= c;
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return c;
}

#ifdef FT_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc_sse42(uint32_t c, const uint8_t* p, size_t n) {
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    c = _mm_crc32_u8(c, *p++);
    --n;
  }
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}

bool detect_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

bool crc32c_hardware() {
#ifdef FT_CRC32C_X86
  static const bool has = detect_sse42();
  return has;
#else
  return false;
#endif
}

uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t seed) {
  return ~crc_table(~seed, static_cast<const uint8_t*>(data), bytes);
}

uint32_t crc32c(const void* data, size_t bytes, uint32_t seed) {
#ifdef FT_CRC32C_X86
  if (crc32c_hardware()) return ~crc_sse42(~seed, static_cast<const uint8_t*>(data), bytes);
#endif
  return crc32c_portable(data, bytes, seed);
}

}  // namespace ft
