// Fuzz entry points for weights and checkpoints: safetensors, HDF5 weight files (structure-aware
// and raw) and checkpoint directories (meta.json + a structure-aware shard + latest).
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "ckpt/canonical.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "core/check.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/support/configs.h"

namespace loom::fuzz {

std::vector<H5Expect> canonical_names() {
  std::vector<H5Expect> out;
  ParamLayout L(test::fixture_model(), 1, 0, 1, 0);
  for (const ParamSpec& p : L.params()) {
    std::vector<uint64_t> d = p.ndim == 1
                                  ? std::vector<uint64_t>{uint64_t(p.cols)}
                                  : std::vector<uint64_t>{uint64_t(p.rows), uint64_t(p.cols)};
    out.push_back({p.name, d});
  }
  return out;
}

std::vector<H5Expect> checkpoint_names() {
  std::vector<H5Expect> out;
  ParamLayout L(test::fixture_model(), 1, 0, 1, 0);
  for (const char* kind : {"param", "exp_avg", "exp_avg_sq"})
    for (const ParamSpec& p : L.params()) {
      std::vector<ShardBlock> bl = L.blocks(p);
      for (size_t k = 0; k < bl.size(); ++k)
        out.push_back(
            {str(kind, "/", p.name, "/", k), {uint64_t(bl[k].rows), uint64_t(bl[k].cols)}});
    }
  return out;
}

namespace {

// After each input, on success and after a refusal, every HDF5 object loom opened is closed: a
// file left open keeps its metadata cache, which a later open of the same path would share.
struct AllHdf5Closed {
  ~AllHdf5Closed() {
    const ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (n == 0) return;
    std::fprintf(stderr, "loom fuzz: property violated: %zd HDF5 objects left open\n", n);
    std::abort();
  }
};

// The layout a load reads into: one rank, or TP rank 1 of 2 (partial reads of every tensor),
// chosen by the input so that both are covered at the cost of one load per run.
ParamLayout tiny_layout(size_t size) {
  const int tp = 1 + int(size % 2);
  return ParamLayout(test::fixture_model(), tp, tp - 1, 1, 0);
}

void load_tiny(const std::string& path, size_t size) {
  ParamLayout L = tiny_layout(size);
  std::vector<float> params(L.total());
  load_canonical(path, L, params.data());
}

}  // namespace

void safetensors(const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/weights.safetensors";
  write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  {
    SafetensorsFile f(path);
    std::vector<float> buf;
    for (const auto& [name, t] : f.tensors()) {
      // Every float tensor of at most 64 Ki elements is read whole (its size was checked
      // against its byte range when the file was opened).
      if (!t.is_float() || t.end - t.begin > (uint64_t(1) << 18)) continue;
      buf.resize(size_t(t.rows() * t.cols()));
      f.read_block_f32(name, 0, 0, t.rows(), t.cols(), buf.data(), t.cols());
    }
  }
  load_tiny(path, size);
}

void hdf5_weights(const uint8_t* data, size_t size) {
  AllHdf5Closed closed;
  const std::string path = scratch_dir() + "/weights.h5";
  static const std::vector<H5Expect> names = canonical_names();
  build_h5(path, std::string_view(reinterpret_cast<const char*>(data), size), names);
  load_tiny(path, size);
}

void hdf5_raw(const uint8_t* data, size_t size) {
  AllHdf5Closed closed;
  const std::string path = scratch_dir() + "/raw.h5";
  write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  load_tiny(path, size);
}

void checkpoint(const uint8_t* data, size_t size) {
  AllHdf5Closed closed;
  namespace fs = std::filesystem;
  static const std::vector<H5Expect> names = checkpoint_names();
  const auto parts = split(data, size, 3);
  const std::string root = scratch_dir() + "/ckpt", dir = root + "/step_0000010";
  fs::remove_all(root);
  fs::create_directories(dir);
  write_file(dir + "/meta.json", parts[0]);
  build_h5(dir + "/shard_pp0_tp0.h5", parts[1], names);
  if (!parts[2].empty()) write_file(root + "/latest", parts[2]);
  // What `loom export` and `loom generate` do with a checkpoint directory, then what a resume
  // into another layout does. Each step must refuse bad input on its own, so a UserError of
  // one does not skip the next.
  const std::string resolved = resolve_checkpoint_dir(parts[2].empty() ? dir : root);
  try {
    Config cfg = checkpoint_config(resolved);
    validate(cfg, 0);
  } catch (const UserError&) {
  }
  try {
    verify_checkpoint(resolved, test::fixture_model());
  } catch (const UserError&) {
  }
  ParamLayout L = tiny_layout(size);
  std::vector<float> p(L.total()), m(L.total()), v(L.total());
  read_checkpoint_tensors(resolved, L, p.data(), m.data(), v.data());
}

}  // namespace loom::fuzz
