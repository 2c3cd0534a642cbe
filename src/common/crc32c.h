// CRC32C (Castagnoli, the checksum of iSCSI, ext4 and SCTP): the end-to-end check of the bytes a
// network message carries when CHORUS_NET_CHECKSUM is on (transports/net/net_proxy.h). With the
// SSE4.2 crc32 instruction where the CPU has it (about 8 bytes every 3 cycles on one core; three
// interleaved streams for long buffers), else a table, 8 bytes at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

// The CRC32C of `n` bytes at `data`, continuing from `crc` (0 to start; the value a previous call
// returned to go on with the next bytes of the same message).
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

// The same, by the table alone: for tests, which compare the two.
uint32_t crc32cPortable(uint32_t crc, const void* data, size_t n);

// Whether crc32c uses the CPU's instruction.
bool crc32cHardware();

}  // namespace chorus
