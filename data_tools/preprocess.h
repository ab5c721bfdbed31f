// loom-preprocess's pipeline: read documents in order, tokenize batches on N worker threads,
// write them in order (so the output is the same for any N) into a Megatron MMIDIDX dataset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data_tools/tokenizer.h"

namespace loom::tok {

struct PreprocessOptions {
  std::vector<std::string> inputs;  // files, directories, globs
  std::string output_prefix;
  std::string json_key = "text";
  std::string split_docs = "file";  // text files: file | paragraph
  bool append_eod = false;
  bool skip_bad = false;  // count and skip malformed JSONL lines instead of failing
  int workers = 1;
  bool progress = false;  // a live progress line on stderr
  size_t batch_bytes = size_t(1) << 20;
};

struct PreprocessSummary {
  int64_t documents = 0;      // written
  int64_t tokens = 0;         // written, EODs included
  int64_t text_bytes = 0;     // bytes of document text tokenized
  int64_t empty_skipped = 0;  // documents with no text
  int64_t bad_skipped = 0;    // malformed JSONL lines skipped (--skip-bad)
  int64_t input_files = 0;
  double seconds = 0;
  mmidx::IdxDType dtype = mmidx::IdxDType::UInt16;
};

// Runs the whole job. Every problem is a UserError naming the file (and line) and the fix; no
// output is left behind on error (the writer uses temporary names until the end).
PreprocessSummary preprocess(const PreprocessOptions& opt, const Tokenizer& tokenizer);

}  // namespace loom::tok
