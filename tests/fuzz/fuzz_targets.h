// The fuzz entry points: each feeds one input to one of loom's parsers of outside input and uses
// what was parsed the way loom does. Bad input must end in loom::UserError; anything else (a
// crash, a sanitizer report, another exception, a broken round trip) is a bug.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "tests/fuzz/h5_builder.h"

namespace loom::fuzz {

using Entry = void (*)(const uint8_t* data, size_t size);

void mmidx(const uint8_t* data, size_t size);         // .idx SEP .bin, then the DataLoader
void safetensors(const uint8_t* data, size_t size);   // a .safetensors file, then load_canonical
void checkpoint(const uint8_t* data, size_t size);    // meta.json SEP shard program SEP latest
void hdf5_weights(const uint8_t* data, size_t size);  // an HDF5 weight-file program
void hdf5_raw(const uint8_t* data, size_t size);      // raw bytes as an .h5 weight file
void config(const uint8_t* data, size_t size);        // YAML SEP --set lines
void tokenizer(const uint8_t* data, size_t size);     // encoder.json SEP vocab.bpe SEP text

struct Target {
  const char* name;
  Entry fn;
};
const std::vector<Target>& targets();

// Every weight and checkpoint target loads test::fixture_model() (tests/support/configs.h), the
// shape of tests/reference/fixtures/gpt2_tiny_*.
// Canonical tensor names and shapes of that model (weight files).
std::vector<H5Expect> canonical_names();
// Dataset names and shapes of its single checkpoint shard (tp 1, pp 1).
std::vector<H5Expect> checkpoint_names();

}  // namespace loom::fuzz
