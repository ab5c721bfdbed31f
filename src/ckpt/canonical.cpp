// Canonical HDF5 weights: shard-wise hyperslab reads, and a gather-to-rank-0 writer.
#include "ckpt/canonical.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "ckpt/hdf5_util.h"

namespace loom {

void load_canonical(const std::string& path, const ParamLayout& layout, float* params) {
  h5::Handle f = h5::open_read(path, "init file");
  // Check every tensor first, so a bad file leaves the parameters untouched.
  for (const ParamSpec& p : layout.params()) {
    if (!h5::has_dataset(f.get(), p.name))
      throw UserError(str("init file '", path, "': missing tensor '", p.name, "'"));
    std::vector<hsize_t> got = h5::dataset_shape(f.get(), p.name, path);
    std::vector<hsize_t> want = p.ndim == 1 ? std::vector<hsize_t>{hsize_t(p.cols)}
                                            : std::vector<hsize_t>{hsize_t(p.rows), hsize_t(p.cols)};
    if (got != want) {
      std::string g = "[", w = "[";
      for (size_t i = 0; i < got.size(); ++i) g += (i ? "," : "") + std::to_string(got[i]);
      for (size_t i = 0; i < want.size(); ++i) w += (i ? "," : "") + std::to_string(want[i]);
      throw UserError(str("init file '", path, "': tensor '", p.name, "' has shape ", g,
                          "], the model needs ", w, "] (check model.* against the file)"));
    }
  }
  for (const ParamSpec& p : layout.params()) {
    float* dst = params + p.offset;
    std::memset(dst, 0, p.numel() * sizeof(float));
    for (const ShardBlock& b : layout.blocks(p))
      h5::read_block_f32(f.get(), p.name, hsize_t(b.grow), hsize_t(b.gcol), hsize_t(b.rows),
                         hsize_t(b.cols), dst + b.lrow * p.lcols + b.lcol, hsize_t(p.lcols), path);
  }
}

namespace {
// Wire format of one shard block: this header, the name, then rows x cols floats.
struct BlockHeader {
  uint32_t name_len;
  int32_t ndim;
  int64_t rows, cols;  // canonical shape
  ShardBlock block;
};

void pack(std::vector<char>& out, const ParamSpec& p, const ShardBlock& b, const float* src) {
  auto put = [&](const void* x, size_t n) {
    const char* c = static_cast<const char*>(x);
    out.insert(out.end(), c, c + n);
  };
  BlockHeader h{uint32_t(p.name.size()), p.ndim, p.rows, p.cols, b};
  put(&h, sizeof h);
  put(p.name.data(), p.name.size());
  for (int64_t r = 0; r < b.rows; ++r) put(src + (b.lrow + r) * p.lcols + b.lcol, size_t(b.cols) * 4);
}

// Rebuilds whole canonical tensors from the concatenated blocks of every rank.
std::map<std::string, CanonicalTensor> unpack(const std::vector<char>& all) {
  std::map<std::string, CanonicalTensor> tensors;
  size_t pos = 0;
  while (pos < all.size()) {
    BlockHeader h;
    std::memcpy(&h, &all[pos], sizeof h);
    pos += sizeof h;
    std::string name(&all[pos], h.name_len);
    pos += h.name_len;
    CanonicalTensor& t = tensors[name];
    if (t.data.empty()) {
      t.rows = h.rows, t.cols = h.cols, t.ndim = h.ndim;
      t.data.assign(size_t(h.rows * h.cols), 0.0f);
    }
    const ShardBlock& b = h.block;
    for (int64_t r = 0; r < b.rows; ++r) {
      std::memcpy(&t.data[size_t((b.grow + r) * t.cols + b.gcol)], &all[pos], size_t(b.cols) * 4);
      pos += size_t(b.cols) * 4;
    }
  }
  return tensors;
}
}  // namespace

std::map<std::string, CanonicalTensor> gather_canonical(const ParamLayout& layout,
                                                        const float* params, ParallelCtx& pc) {
  // Each tensor element is exported by exactly one rank: the dp-rank-0 replica's norm owner.
  std::vector<char> mine;
  if (pc.coord.dp == 0)
    for (const ParamSpec& p : layout.params())
      if (p.norm_owner)
        for (const ShardBlock& b : layout.blocks(p)) pack(mine, p, b, params + p.offset);

  int n = int(mine.size());
  LOOM_CHECK(mine.size() < size_t(1) << 31, "export shard of ", mine.size(), " bytes");
  std::vector<int> sizes(size_t(pc.world.size())), displs(sizes.size());
  LOOM_MPI(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, pc.world.mpi()));
  std::vector<char> all;
  if (pc.rank == 0) {
    size_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      displs[i] = int(total);
      total += size_t(sizes[i]);
    }
    LOOM_CHECK(total < size_t(1) << 31, "export of ", total, " bytes needs chunking");
    all.resize(total);
  }
  LOOM_MPI(MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE,
                       0, pc.world.mpi()));
  if (pc.rank != 0) return {};
  return unpack(all);
}

void save_canonical(const std::string& path, const ParamLayout& layout, const float* params,
                    ParallelCtx& pc) {
  std::map<std::string, CanonicalTensor> tensors = gather_canonical(layout, params, pc);
  if (pc.rank != 0) return;
  std::string tmp = path + ".tmp";
  {
    h5::Handle f = h5::create(tmp);
    for (const auto& [name, t] : tensors) {
      std::vector<hsize_t> shape = t.ndim == 1 ? std::vector<hsize_t>{hsize_t(t.cols)}
                                               : std::vector<hsize_t>{hsize_t(t.rows), hsize_t(t.cols)};
      h5::write_f32(f.get(), name, shape, t.data.data(), tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw UserError(str("cannot rename '", tmp, "' to '", path, "'"));
}

}  // namespace loom
