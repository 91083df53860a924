// CRC32C (Castagnoli), the checksum of checkpoint files in their manifest. Uses the SSE4.2 crc32 instruction
// when the CPU has it (several GB/s, so checking a multi-GB shard costs little next to reading it) and a
// table otherwise; both give the standard CRC32C (crc32c("123456789") == 0xE3069283).
#pragma once
#include <cstddef>
#include <cstdint>

namespace primer::io {

// Extends `crc` (0 for a fresh checksum) over `bytes` bytes at `data`.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t bytes);

}  // namespace primer::io
