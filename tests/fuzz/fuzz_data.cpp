// Fuzz entry points for text and token inputs: MMIDIDX datasets (read through the DataLoader),
// YAML configs with --set overrides, and the GPT-2 tokenizer files.
#include <cstdio>
#include <cstdlib>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data_tools/tokenizer.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/fuzz/fuzz_util.h"

namespace loom::fuzz {

namespace {
// A property every valid input must keep (not an input error): report and stop.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "loom fuzz: property violated: %s\n", what);
  std::abort();
}
}  // namespace

void mmidx(const uint8_t* data, size_t size) {
  const auto parts = split(data, size, 2);
  const std::string prefix = scratch_dir() + "/tokens";
  write_file(prefix + ".idx", parts[0]);
  write_file(prefix + ".bin", parts[1]);
  {
    IndexedDataset ds(prefix);
    std::vector<int32_t> buf;
    int64_t budget = int64_t(1) << 16;  // tokens read directly, at most
    for (int64_t s = 0; s < ds.num_sequences() && budget > 0; ++s) {
      const int64_t n = std::min<int64_t>(ds.sequence_length(s), budget);
      buf.resize(size_t(n));
      ds.read(s, 0, n, buf.data());
      budget -= std::max<int64_t>(n, 1);
    }
    for (int64_t d = 0; d < ds.num_documents() && d < 4096; ++d) ds.document_tokens(d);
  }
  // The training path: a 90/10 split with shuffling, T = 4; every token must be < 65536.
  DataConfig dc;
  dc.train.push_back({prefix, 1.0});
  dc.split = "9,1,0";
  DataLoader loader(dc, 4, 65536, 1);
  std::vector<int32_t> in(8 * 4), out(8 * 4);
  loader.train_batch(0, 8, in.data(), out.data());
  loader.train_batch(loader.train_samples_per_epoch(), 8, in.data(), out.data());
  if (loader.has_valid()) loader.valid_batch(0, 8, in.data(), out.data());
}

void config(const uint8_t* data, size_t size) {
  const auto parts = split(data, size, 2);
  std::vector<std::string> overrides;
  for (size_t pos = 0; pos < parts[1].size() && overrides.size() < 16;) {
    size_t end = parts[1].find('\n', pos);
    if (end == std::string_view::npos) end = parts[1].size();
    overrides.emplace_back(parts[1].substr(pos, end - pos));
    pos = end + 1;
  }
  Config cfg = parse_config(std::string(parts[0]), overrides, "fuzz.yaml");
  validate(cfg, 0);
  validate(cfg, 8);
  // The resolved config is written into metrics and checkpoints and read back on resume: it
  // must parse to the same config.
  const std::string text = to_yaml(cfg);
  std::string again;
  try {
    again = to_yaml(parse_config(text, {}, "round trip"));
  } catch (const UserError& e) {
    std::fprintf(stderr, "round trip of\n%s\nfailed: %s\n", text.c_str(), e.what());
    require(false, "to_yaml output parses");
  }
  require(again == text, "parse_config(to_yaml(cfg)) gives cfg back");
}

void tokenizer(const uint8_t* data, size_t size) {
  const auto parts = split(data, size, 3);
  const std::string vocab = scratch_dir() + "/encoder.json", merges = scratch_dir() + "/vocab.bpe";
  write_file(vocab, parts[0]);
  write_file(merges, parts[1]);
  auto tok = tok::make_tokenizer("gpt2", vocab, merges);
  std::vector<int32_t> ids;
  tok->make_encoder()->encode(parts[2], ids);
  for (int32_t id : ids)
    require(id >= 0 && id < tok->vocab_size(), "token ids are in the vocabulary");
  // Byte-level BPE is lossless whatever the merges: decoding gives the text back.
  require(tok->decode(ids.data(), ids.size()) == parts[2], "decode(encode(text)) == text");
}

const std::vector<Target>& targets() {
  static const std::vector<Target> t = {{"mmidx", mmidx},           {"safetensors", safetensors},
                                        {"checkpoint", checkpoint}, {"hdf5_weights", hdf5_weights},
                                        {"hdf5_raw", hdf5_raw},     {"config", config},
                                        {"tokenizer", tokenizer}};
  return t;
}

}  // namespace loom::fuzz
