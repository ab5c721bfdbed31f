// File helpers for checkpoints: whole writes, fsync of files and directories, CRC-32 of a file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

void fsync_path(const std::string& path);  // a file or a directory; throws UserError on failure
uint32_t file_crc32(const std::string& path, uint64_t* bytes = nullptr);
void write_text_file_atomic(const std::string& path, const std::string& text);
// All n bytes to fd (retried on EINTR and short writes); false on an error (errno set).
bool write_all(int fd, const void* buf, size_t n);
// Best effort: fsync the directory holding path, so that a rename into it is durable.
void fsync_dir_of(const std::string& path);

}  // namespace loom
