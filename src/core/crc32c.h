// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the checksum of every
// checkpoint section. Chosen over CRC-32 (zlib) because x86 has an instruction for it
// (SSE4.2 `crc32`), so checking a multi-GiB checkpoint costs about as much as reading it.
//
// Incremental: crc32c(b, nb, crc32c(a, na)) == crc32c(a ++ b). The seed is a previous
// result (0 to start); the pre/post inversion is handled inside.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ft {

uint32_t crc32c(const void* data, size_t bytes, uint32_t seed = 0);

// The portable slicing-by-8 path, exposed so tests can check it against the hardware path.
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t seed = 0);

// True when crc32c() uses the SSE4.2 instruction on this machine.
bool crc32c_hardware();

}  // namespace ft
