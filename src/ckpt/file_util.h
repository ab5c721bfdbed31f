// File helpers for checkpoints: fsync of files and directories, CRC-32 of a file.
#pragma once
#include <cstdint>
#include <string>

namespace loom {

void fsync_path(const std::string& path);  // a file or a directory; throws UserError on failure
uint32_t file_crc32(const std::string& path, uint64_t* bytes = nullptr);
void write_text_file_atomic(const std::string& path, const std::string& text);

}  // namespace loom
