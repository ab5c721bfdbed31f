// The config schema as data: one row per YAML key, naming its section, key, type and struct slot.
#include "config/fields.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom {

// LOOM_FIELD(model, n_layer, Int): the key is spelled once, as the struct member, so YAML keys
// and field names cannot drift apart.
#define LOOM_FIELD(sec, name, kind) \
  Field{#sec, #name, FieldKind::kind, [](Config& c) -> void* { return &c.sec.name; }}

const std::vector<Field>& config_fields() {
  static const std::vector<Field> fields = {
      LOOM_FIELD(run, name, String),
      LOOM_FIELD(run, dir, String),
      LOOM_FIELD(model, arch, String),
      LOOM_FIELD(model, n_layer, Int),
      LOOM_FIELD(model, n_head, Int),
      LOOM_FIELD(model, n_kv_head, Int),
      LOOM_FIELD(model, d_model, Int),
      LOOM_FIELD(model, ffn_hidden, Int),
      LOOM_FIELD(model, vocab_size, Int),
      LOOM_FIELD(model, seq_len, Int),
      LOOM_FIELD(model, max_positions, Int),
      LOOM_FIELD(model, rope_theta, Double),
      LOOM_FIELD(model, norm_eps, Double),
      LOOM_FIELD(model, tie_embeddings, Bool),
      LOOM_FIELD(model, dropout, Double),
      LOOM_FIELD(model.moe, num_experts, Int),
      LOOM_FIELD(model.moe, top_k, Int),
      LOOM_FIELD(model.moe, capacity_factor, Double),
      LOOM_FIELD(model.moe, aux_loss_coef, Double),
      LOOM_FIELD(model.moe, z_loss_coef, Double),
      LOOM_FIELD(parallel, tp, Int),
      LOOM_FIELD(parallel, pp, Int),
      LOOM_FIELD(parallel, dp, Int),
      LOOM_FIELD(parallel, cp, Int),
      LOOM_FIELD(parallel, ep, Int),
      LOOM_FIELD(parallel, micro_batch_size, Int),
      LOOM_FIELD(parallel, schedule, String),
      LOOM_FIELD(parallel, order, String),
      LOOM_FIELD(parallel, stage_layers, IntList),
      LOOM_FIELD(parallel, virtual_stages, Int),
      LOOM_FIELD(parallel, comm_timeout, Double),
      LOOM_FIELD(parallel, strict_topology, Bool),
      LOOM_FIELD(parallel, overlap, Bool),
      LOOM_FIELD(parallel, sequence_parallel, Bool),
      LOOM_FIELD(train, global_batch_size, Int),
      LOOM_FIELD(train, steps, Int),
      LOOM_FIELD(train, seed, UInt64),
      LOOM_FIELD(train, init_from, String),
      LOOM_FIELD(train, grad_clip, Double),
      LOOM_FIELD(train, log_interval, Int),
      LOOM_FIELD(train, eval_interval, Int),
      LOOM_FIELD(train, eval_iters, Int),
      LOOM_FIELD(train, recompute, String),
      LOOM_FIELD(train, cuda_graph, Bool),
      LOOM_FIELD(train, dtype, String),
      LOOM_FIELD(train, loss_scale, String),
      LOOM_FIELD(train, initial_loss_scale, Double),
      LOOM_FIELD(train, loss_scale_window, Int),
      LOOM_FIELD(optimizer, lr, Double),
      LOOM_FIELD(optimizer, min_lr, Double),
      LOOM_FIELD(optimizer, warmup_steps, Int),
      LOOM_FIELD(optimizer, decay_steps, Int),
      LOOM_FIELD(optimizer, schedule, String),
      LOOM_FIELD(optimizer, beta1, Double),
      LOOM_FIELD(optimizer, beta2, Double),
      LOOM_FIELD(optimizer, eps, Double),
      LOOM_FIELD(optimizer, weight_decay, Double),
      LOOM_FIELD(optimizer, zero_stage, Int),
      LOOM_FIELD(data, train, Sources),
      LOOM_FIELD(data, valid, Sources),
      LOOM_FIELD(data, shuffle, Bool),
      LOOM_FIELD(data, split, String),
      LOOM_FIELD(tokenizer, type, String),
      LOOM_FIELD(tokenizer, vocab, String),
      LOOM_FIELD(tokenizer, merges, String),
      LOOM_FIELD(checkpoint, dir, String),
      LOOM_FIELD(checkpoint, save_interval, Int),
      LOOM_FIELD(checkpoint, keep_last, Int),
      LOOM_FIELD(checkpoint, resume, String),
      LOOM_FIELD(checkpoint, async, Bool),
      LOOM_FIELD(log, peak_flops, Double),
      LOOM_FIELD(log, tensorboard, Bool),
      LOOM_FIELD(log, timers, Bool),
      Field{"", "device", FieldKind::String, [](Config& c) -> void* { return &c.device; }},
  };
  return fields;
}

#undef LOOM_FIELD

const std::vector<std::string>& top_level_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& f : config_fields()) {
      // The part before the first dot: a subsection (model.moe) belongs to its section.
      const std::string section = f.section;
      const std::string name = *f.section ? section.substr(0, section.find('.')) : f.key;
      if (out.empty() || out.back() != name) out.push_back(name);
    }
    return out;
  }();
  return names;
}

bool is_section(const std::string& name) {
  for (const auto& f : config_fields())
    if (name == f.section) return !name.empty();
  return false;
}

std::vector<std::string> section_keys(const std::string& section) {
  std::vector<std::string> out;
  for (const auto& f : config_fields()) {
    const std::string sec = f.section;
    if (section == sec) out.push_back(f.key);
    // A subsection's name among its section's keys (once): "moe" in "model".
    if (!section.empty() && sec.rfind(section + ".", 0) == 0) {
      const std::string sub = sec.substr(section.size() + 1);
      if (std::find(out.begin(), out.end(), sub) == out.end()) out.push_back(sub);
    }
  }
  return out;
}

const Field* find_field(const std::string& section, const std::string& key) {
  for (const auto& f : config_fields())
    if (section == f.section && key == f.key) return &f;
  return nullptr;
}

const char* kind_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::Int: return "an integer";
    case FieldKind::UInt64: return "a non-negative integer";
    case FieldKind::Double: return "a number";
    case FieldKind::Bool: return "true or false";
    case FieldKind::String: return "a string";
    case FieldKind::IntList: return "a list of integers";
    case FieldKind::Sources: return "a dataset prefix or a list of {prefix, weight}";
  }
  return "a value";
}

std::string format_double(double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace loom
