// One transformer layer's tensors looked up by their canonical names in a ParamLayout, shared by
// the training stage (GPTStage) and the cached decoder (DecodeStage).
#pragma once
#include <string>

#include "layout/param_layout.h"
#include "model/block.h"

namespace loom {

// Layer `layer`'s twelve tensors in BlockTensors order, each looked up by at(spec) of
// "h.<layer>.<name>"; the tensors the family does not have (llama's biases) are null.
template <typename P, typename At>
BlockTensors<P> layer_tensors(const ParamLayout& layout, int layer, At at) {
  const std::string h = "h." + std::to_string(layer) + ".";
  auto p = [&](const char* name) -> P {
    const ParamSpec* spec = layout.find(h + name);
    return spec ? at(*spec) : nullptr;
  };
  // The dense MLP's tensors, or the experts' (docs/moe.md) in the same slots.
  auto mlp = [&](const char* dense, const char* experts) {
    const P t = p(dense);
    return t ? t : p(experts);
  };
  return BlockTensors<P>{p("ln_1.weight"),
                         p("ln_1.bias"),
                         p("attn.c_attn.weight"),
                         p("attn.c_attn.bias"),
                         p("attn.c_proj.weight"),
                         p("attn.c_proj.bias"),
                         p("ln_2.weight"),
                         p("ln_2.bias"),
                         mlp("mlp.c_fc.weight", "mlp.experts.c_fc.weight"),
                         mlp("mlp.c_fc.bias", "mlp.experts.c_fc.bias"),
                         mlp("mlp.c_proj.weight", "mlp.experts.c_proj.weight"),
                         mlp("mlp.c_proj.bias", "mlp.experts.c_proj.bias"),
                         p("mlp.router.weight")};
}

}  // namespace loom
