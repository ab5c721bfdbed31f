// The file of an export (safetensors or HDF5 with canonical or Hugging Face names), written one
// chunk at a time under a temporary name and renamed when complete, and its config.json.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ckpt/gather_chunks.h"
#include "config/config.h"

namespace loom {

class SafetensorsStreamWriter;
class Hdf5StreamWriter;

// Every canonical tensor of model m under its canonical name, sorted by name (file order).
std::vector<OutTensor> canonical_outs(const ModelConfig& m);
// What an export of m to `path` holds, in file order: a llama model's safetensors file has the
// Hugging Face LlamaForCausalLM tensors (ckpt/hf_llama.h), every other file the canonical ones.
std::vector<OutTensor> export_outs(const std::string& path, const ModelConfig& m);

class ExportFile {
 public:
  // Creates `path` (".safetensors": F32 safetensors in `outs` order; else HDF5) under a
  // temporary name; UserError when it cannot.
  ExportFile(const std::string& path, const std::vector<OutTensor>& outs);
  ~ExportFile();
  ExportFile(const ExportFile&) = delete;
  ExportFile& operator=(const ExportFile&) = delete;
  // Chunk `r` (output coordinates, rows x cols values) of output `out`: the outputs in order,
  // each one's chunks in row-major order.
  void write(size_t out, const Rect& r, const float* values);
  // Every value written: sync and rename. With `model`, a safetensors export also gets the
  // Hugging Face config.json in its directory (overwriting one there).
  void commit(const ModelConfig* model);

 private:
  std::string path_;
  std::vector<OutTensor> outs_;
  std::unique_ptr<SafetensorsStreamWriter> st_;
  std::unique_ptr<Hdf5StreamWriter> h5_;
};

}  // namespace loom
