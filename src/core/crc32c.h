// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78), the checksum of TFRecord framing.
#pragma once
#include <cstddef>
#include <cstdint>

namespace loom {

// CRC-32C of n bytes, continuing from `crc` (0 to start): crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The masked form TFRecord stores: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace loom
