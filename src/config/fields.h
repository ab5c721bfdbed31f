// The config schema as data: one row per YAML key, naming its section, key, type and struct slot.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace loom {

enum class FieldKind { Int, UInt64, Double, Bool, String, IntList, Sources };

struct Field {
  const char* section;          // "" for a top-level scalar (device)
  const char* key;              // exactly the struct member's name
  FieldKind kind;
  void* (*slot)(Config& cfg);   // the member this key fills: int*, uint64_t*, double*, ...

  std::string path() const { return *section ? std::string(section) + "." + key : key; }
};

// Every key, in the order to_yaml writes them (sections in declaration order).
const std::vector<Field>& config_fields();
// The top-level names: the sections in order, then the top-level scalars (device).
const std::vector<std::string>& top_level_names();
// True for a top-level name that holds a mapping of keys (not a scalar like device).
bool is_section(const std::string& name);
// The keys of one section ("" -> the top-level scalars).
std::vector<std::string> section_keys(const std::string& section);
// The row for section.key, or nullptr.
const Field* find_field(const std::string& section, const std::string& key);
// "an integer", "a number", ... for messages.
const char* kind_name(FieldKind kind);

// Shortest decimal text that reads back as exactly the same double ("0.1", "6e-04" -> "0.0006").
std::string format_double(double v);

}  // namespace loom
