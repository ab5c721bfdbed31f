// What loom generate and loom serve share: a checkpoint's config on the layout of the --set
// overrides, and one rank's part of the model for decoding (its stage, backend and KV cache).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "data_tools/tokenizer.h"
#include "model/decode_stage.h"
#include "parallel/parallel_ctx.h"

namespace loom::cli {

// The checkpoint at ckpt (a step directory or a checkpoint.dir), its config on the layout of
// the overrides (parallel.*, device, train.dtype; anything else refused, naming command), its
// tokenizer. Collective: every rank reads the same files.
struct DecodeCheckpoint {
  std::string dir;
  Config config;
  std::unique_ptr<tok::Tokenizer> tokenizer;
};
DecodeCheckpoint open_decode_checkpoint(const std::string& command, const std::string& ckpt,
                                        const std::vector<std::string>& overrides, int world);

// One rank's decoder: the grid, the backend (a GPU per rank on cuda) and a DecodeStage holding
// this rank's weights and `slots` cache slots (rows per forward: a whole context with the
// cache, every slot's whole context without it).
struct Decoder {
  std::unique_ptr<ParallelCtx> pc;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DecodeStage> stage;
};
Decoder make_decoder(const DecodeCheckpoint& ck, int slots, bool use_cache);

// The ids sampling may pick: the first min(tokenizer, model) vocabulary entries, less
// undecodable_ids (which the Generator blocks).
int sample_vocab(const DecodeCheckpoint& ck);
// The ids below sample_vocab that the tokenizer cannot decode (unused ranks of a tiktoken file
// or a tokenizer.json), found by decoding each id once.
std::vector<int32_t> undecodable_ids(const DecodeCheckpoint& ck);

}  // namespace loom::cli
